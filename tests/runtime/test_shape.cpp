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

TEST_CASE("tensor: empty, from_blob and the constructor refuse counts past int64", "[runtime]") {
  REQUIRE_TYPED_ERROR(Tensor::empty({k2to32, k2to32}), ShapeError, "empty: shape [4294967296, 4294967296]");
  REQUIRE_TYPED_ERROR(Tensor::empty({int64_t{1} << 62}, DType::f32), ShapeError,
                      "empty: shape [4611686018427387904] of f32 needs more than 2^63 - 1 bytes");
  REQUIRE_TYPED_ERROR(Tensor::empty({2, -1}), ShapeError, "empty: negative size in shape [2, -1]");
  float one = 1;
  REQUIRE_TYPED_ERROR(Tensor::from_blob(&one, {kWrapA, kWrapB}, DType::f32, Device::cpu()), ShapeError,
                      "from_blob: shape [274177, 67280421310721] has more than 2^63 - 1 elements");
  REQUIRE_TYPED_ERROR(Tensor(Tensor::empty({1}).storage(), {k2to32, k2to32}, {0, 0}, 0, DType::f32), ShapeError,
                      "Tensor: shape [4294967296, 4294967296]");
}

TEST_CASE("tensor: view and reshape refuse target shapes whose count wraps", "[runtime]") {
  const Tensor one = zeros({1});
  // Unchecked, both wrapped to 1 element and returned a view of 2^64 + 1 elements over one float.
  REQUIRE_TYPED_ERROR(one.view({kWrapA, kWrapB}), ShapeError,
                      "view: shape [274177, 67280421310721] has more than 2^63 - 1 elements");
  REQUIRE_TYPED_ERROR(one.view({kWrapA, kWrapB, -1}), ShapeError,
                      "view: shape [274177, 67280421310721, -1] has more than 2^63 - 1 elements");
  REQUIRE_TYPED_ERROR(one.reshape({kWrapA, -1, kWrapB}), ShapeError, "reshape: shape [274177, -1, 67280421310721]");
  REQUIRE_TYPED_ERROR(zeros({0}).reshape({0, k2to32, k2to32}), ShapeError, "reshape: shape [0, 4294967296, 4294967296]");
  CHECK(zeros({0}).reshape({0, k2to32}).shape() == Shape{0, k2to32});
}

TEST_CASE("tensor: expand refuses negative sizes and counts past int64", "[runtime]") {
  const Tensor one = zeros({1, 1});
  CHECK(one.expand({k2to32, 2}).numel() == 2 * k2to32);  // stride 0: no memory, a count that fits
  REQUIRE_TYPED_ERROR(one.expand({k2to32, k2to32}), ShapeError,
                      "expand: shape [4294967296, 4294967296] has more than 2^63 - 1 elements");
  REQUIRE_TYPED_ERROR(one.expand({3, -5, 1}), ShapeError, "expand: negative size in shape [3, -5, 1]");
  REQUIRE_TYPED_ERROR(one.expand({-5, 1}), ShapeError, "expand: negative size in shape [-5, 1]");
  // An expanded view may count more bytes than int64 holds; asking for them is an error, not a wrapped size.
  const Tensor wide = zeros({1}, {DType::f64}).expand({int64_t{1} << 61});
  REQUIRE_TYPED_ERROR(wide.nbytes(), ShapeError, "nbytes: shape [2305843009213693952] of f64 needs more than");
}

TEST_CASE("tensor: narrow compares its range without overflowing start + length", "[runtime]") {
  const Tensor t = zeros({4, 3});
  CHECK(t.narrow(0, 4, 0).numel() == 0);
  CHECK(t.narrow(0, 1, 3).shape() == Shape{3, 3});
  // start + length wraps to a negative number, which compared as in bounds.
  REQUIRE_TYPED_ERROR(t.narrow(0, kInt64Max, 1), ShapeError,
                      "narrow: start 9223372036854775807 and length 1 out of bounds for dim 0 of f32[4, 3] cpu");
  REQUIRE_TYPED_ERROR(t.narrow(1, 2, kInt64Max), ShapeError, "narrow: start 2 and length 9223372036854775807");
  REQUIRE_TYPED_ERROR(t.narrow(0, 2, 3), ShapeError, "narrow: start 2 and length 3 out of bounds");
}
