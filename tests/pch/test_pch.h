// Precompiled header of the test binaries: Catch2's single header and the headers nearly every test file reads.
// Parsing them was most of the time a test file took to compile; each test target now parses them once.
// Only what tests include anyway belongs here (the file is force-included into every test source).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/errors.h"
#include "runtime/factories.h"
#include "runtime/tensor.h"
