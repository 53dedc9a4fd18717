// Factories refuse bad arguments with ShardRT's typed errors naming the factory: shapes whose element or byte
// count overflows (ShapeError), and non-finite, zero-step or too-long ranges and bad random parameters
// (ValueError). No std::length_error or std::bad_alloc escapes, and a request the host cannot hold is the
// allocator's typed error naming the bytes.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/allocator.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "runtime/tensor.h"
#include "tests/runtime/require_typed_error.h"

using namespace shardrt;

namespace {
constexpr int64_t k2to32 = int64_t{1} << 32;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("factories: shapes whose count overflows are a ShapeError naming the factory", "[runtime]") {
  // Unchecked, zeros wrapped the count to 0, allocated nothing and its fill wrote through a null pointer.
  REQUIRE_TYPED_ERROR(zeros({k2to32, k2to32}), ShapeError,
                      "zeros: shape [4294967296, 4294967296] has more than 2^63 - 1 elements");
  REQUIRE_TYPED_ERROR(ones({k2to32, k2to32}), ShapeError, "ones: shape [4294967296, 4294967296]");
  REQUIRE_TYPED_ERROR(full({k2to32, k2to32}, 2.0), ShapeError, "full: shape [4294967296, 4294967296]");
  REQUIRE_TYPED_ERROR(zeros({int64_t{1} << 62}, {DType::f32}), ShapeError,
                      "zeros: shape [4611686018427387904] of f32 needs more than 2^63 - 1 bytes");
  REQUIRE_TYPED_ERROR(ones({2, -1}), ShapeError, "ones: negative size in shape [2, -1]");
  // The count wrapped to 0, matched the empty vector, and gave a tensor of 2^64 elements over no memory.
  REQUIRE_TYPED_ERROR(from_vector({}, {k2to32, k2to32}), ShapeError, "from_vector: shape [4294967296, 4294967296]");
  REQUIRE_TYPED_ERROR(rand({k2to32, k2to32}), ShapeError, "rand: shape [4294967296, 4294967296]");
  REQUIRE_TYPED_ERROR(randn({int64_t{1} << 62}, {DType::bf16}), ShapeError,
                      "randn: shape [4611686018427387904] of f32 needs more than 2^63 - 1 bytes");
}

TEST_CASE("arange: non-finite arguments, a zero step or a count past int64 are a ValueError naming them",
          "[runtime]") {
  // 1e20 elements used to reach std::vector and leave as std::length_error.
  REQUIRE_TYPED_ERROR(arange(0, 1e20), ValueError, "arange(0, 1e+20, 1): 1e+20 elements do not fit in int64");
  REQUIRE_TYPED_ERROR(arange(0, kInf), ValueError, "arange(0, inf, 1): start, end and step must be finite");
  REQUIRE_TYPED_ERROR(arange(-kInf, 0), ValueError, "arange(-inf, 0, 1): start, end and step must be finite");
  REQUIRE_TYPED_ERROR(arange(kNaN, 1), ValueError, "arange(nan, 1, 1): start, end and step must be finite");
  REQUIRE_TYPED_ERROR(arange(0, 1, kNaN), ValueError, "arange(0, 1, nan): start, end and step must be finite");
  REQUIRE_TYPED_ERROR(arange(0, 1, 0), ValueError, "arange(0, 1, 0): step must be nonzero");
  // Finite arguments whose span is past the largest double.
  REQUIRE_TYPED_ERROR(arange(-1e308, 1e308), ValueError, "arange(-1e+308, 1e+308, 1): inf elements do not fit");
  REQUIRE_TYPED_ERROR(arange(0, 0x1p63), ValueError, "elements do not fit in int64");
  // A count that fits in int64 whose bytes do not.
  REQUIRE_TYPED_ERROR(arange(0, 0x1p62), ShapeError,
                      "arange: shape [4611686018427387904] of f64 needs more than 2^63 - 1 bytes");
}

TEST_CASE("arange: valid ranges are unchanged", "[runtime]") {
  CHECK(arange(0, 5).to_vector() == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(arange(5, 0, -2).to_vector() == std::vector<double>{5, 3, 1});
  CHECK(arange(0, 1, 0.25, {DType::f64}).to_vector() == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(arange(0, 3, 1, {DType::i32}).dtype() == DType::i32);
  CHECK(arange(0, 3, 1, {DType::i32}).to_vector() == std::vector<double>{0, 1, 2});
  CHECK(arange(3, 3).numel() == 0);
  CHECK(arange(0, -1e20).numel() == 0);  // an empty range, however far the end
}

TEST_CASE("rand and randn: non-finite or reversed parameters are a ValueError, and the draw is not spent",
          "[runtime]") {
  Generator g(3);
  REQUIRE_TYPED_ERROR(rand({2}, {}, &g, 0.0, kInf), ValueError, "rand: bounds [0, inf) must be finite");
  REQUIRE_TYPED_ERROR(rand({2}, {}, &g, kNaN, 1.0), ValueError, "rand: bounds [nan, 1)");
  REQUIRE_TYPED_ERROR(rand({2}, {}, &g, 1.0, 0.0), ValueError, "rand: bounds [1, 0) must be finite with low <= high");
  REQUIRE_TYPED_ERROR(randn({2}, {}, &g, 0.0, -1.0), ValueError, "randn: mean 0 and std -1 must be finite with std >= 0");
  REQUIRE_TYPED_ERROR(randn({2}, {}, &g, kInf, 1.0), ValueError, "randn: mean inf and std 1");
  REQUIRE_TYPED_ERROR(randn({2}, {}, &g, 0.0, kNaN), ValueError, "randn: mean 0 and std nan");
  REQUIRE_TYPED_ERROR(rand({k2to32, k2to32}, {}, &g), ShapeError, "rand: shape");
  CHECK(g.offset() == 0);
  CHECK(rand({2}, {}, &g, 1.0, 1.0).to_vector() == std::vector<double>{1, 1});  // an empty range is one point
  CHECK(randn({2}, {}, &g, 0.5, 0.0).to_vector() == std::vector<double>{0.5, 0.5});
  CHECK(g.offset() == 2);
}

TEST_CASE("allocator: a request the host cannot hold is a typed error naming the bytes", "[runtime]") {
  const MemoryStats before = memory_stats(Device::cpu());
  // Rounding this up to the 64-byte alignment wrapped to 0, and aligned_alloc(64, 0) returned a pointer.
  const std::size_t near_max = std::numeric_limits<std::size_t>::max() - 10;
  REQUIRE_TYPED_ERROR(cpu_allocator().allocate(near_max), ValueError,
                      "cpu_allocator: " + std::to_string(near_max) + " bytes requested");
  // 2^60 bytes: a count and a byte size that fit, but more than any host's address space.
  REQUIRE_TYPED_ERROR(zeros({int64_t{1} << 57}, {DType::f64}), ValueError,
                      "cpu_allocator: out of host memory allocating 1152921504606846976 bytes");
  REQUIRE_TYPED_ERROR(arange(0, 0x1p57), ValueError, "allocating 1152921504606846976 bytes");
  const MemoryStats after = memory_stats(Device::cpu());
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.allocations == before.allocations);
}
