// One assertion for "throws this ShardRT error type, with a message that says this": the type is what a caller
// catches, the fragment is what a person reading the log needs (the op and the offending shape or argument).
#pragma once
#include <catch2/catch.hpp>

#define REQUIRE_TYPED_ERROR(expr, Type, fragment)         \
  do {                                                    \
    REQUIRE_THROWS_AS(expr, Type);                        \
    REQUIRE_THROWS_WITH(expr, Catch::Contains(fragment)); \
  } while (0)
