// Element and byte counts of shapes are checked: a negative size, or a count past int64, is a ShapeError naming
// the op and the shape, wherever a shape enters a Tensor (empty, from_blob, the constructor, view, reshape,
// expand, narrow, broadcasting). Before, such counts wrapped around and tensors addressed memory they did not own.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>

#include "runtime/errors.h"
#include "runtime/factories.h"
#include "runtime/shape.h"
#include "runtime/tensor.h"
#include "tests/runtime/require_typed_error.h"

using namespace shardrt;

namespace {
constexpr int64_t k2to32 = int64_t{1} << 32;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// 2^64 + 1 = 274177 * 67280421310721: a shape of these two sizes wrapped to 1 element under unchecked arithmetic.
constexpr int64_t kWrapA = 274177, kWrapB = 67280421310721;
}  // namespace

TEST_CASE("shape_numel: counts that fit are exact, up to int64 max", "[runtime]") {
  CHECK(shape_numel({}) == 1);
  CHECK(shape_numel({2, 3, 4}) == 24);
  CHECK(shape_numel({0, k2to32, k2to32 / 4}) == 0);  // the nonzero sizes multiply to 2^62, which fits
  CHECK(shape_numel({int64_t{1} << 31, int64_t{1} << 31}) == int64_t{1} << 62);
  CHECK(shape_numel({kInt64Max, 1}) == kInt64Max);
}

TEST_CASE("shape_numel: a count past int64 is a ShapeError naming the op and the shape", "[runtime]") {
  REQUIRE_TYPED_ERROR(shape_numel({k2to32, k2to32}, "my_op"), ShapeError,
                      "my_op: shape [4294967296, 4294967296] has more than 2^63 - 1 elements");
  REQUIRE_TYPED_ERROR(shape_numel({kInt64Max, 2}, "my_op"), ShapeError, "my_op: shape [9223372036854775807, 2]");
  REQUIRE_TYPED_ERROR(shape_numel({kWrapA, kWrapB}, "my_op"), ShapeError, "has more than 2^63 - 1 elements");
  // With a 0 the count is 0, but the contiguous strides are products of the other sizes and would wrap.
  REQUIRE_TYPED_ERROR(shape_numel({0, k2to32, k2to32}, "my_op"), ShapeError,
                      "my_op: shape [0, 4294967296, 4294967296] has nonzero sizes whose product exceeds 2^63 - 1");
  REQUIRE_TYPED_ERROR(shape_numel({2, -3}, "my_op"), ShapeError, "my_op: negative size in shape [2, -3]");
}

TEST_CASE("shape_nbytes: bytes past int64 are a ShapeError naming the op, shape and dtype", "[runtime]") {
  CHECK(shape_nbytes({2, 3}, DType::f64, "my_op") == 48);
  CHECK(shape_nbytes({int64_t{1} << 62}, DType::u8, "my_op") == int64_t{1} << 62);
  CHECK(shape_nbytes({(int64_t{1} << 60) - 1}, DType::f64, "my_op") == kInt64Max - 7);  // 2^63 - 8
  REQUIRE_TYPED_ERROR(shape_nbytes({int64_t{1} << 60}, DType::f64, "my_op"), ShapeError,
                      "my_op: shape [1152921504606846976] of f64 needs more than 2^63 - 1 bytes");
  REQUIRE_TYPED_ERROR(shape_nbytes({k2to32, k2to32}, DType::u8, "my_op"), ShapeError, "has more than 2^63 - 1 elements");
}

TEST_CASE("broadcast_shapes: two valid shapes that broadcast past int64 are a ShapeError naming the op", "[runtime]") {
  CHECK(broadcast_shapes({k2to32, 1}, {1, 4}, "add") == Shape{k2to32, 4});
  REQUIRE_TYPED_ERROR(broadcast_shapes({k2to32, 1}, {1, k2to32}, "add"), ShapeError,
                      "add: shape [4294967296, 4294967296] has more than 2^63 - 1 elements");
}
