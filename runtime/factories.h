// Tensor factories: constant, ranges, and random tensors from the counter-based Philox generator.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "runtime/tensor.h"

namespace shardrt {

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
};

Tensor zeros(const Shape& shape, TensorOptions opt = {});
Tensor ones(const Shape& shape, TensorOptions opt = {});
Tensor full(const Shape& shape, double value, TensorOptions opt = {});
// [start, end) with `step`, like numpy.arange; dtype from opt.
Tensor arange(double start, double end, double step = 1.0, TensorOptions opt = {});
// A tensor holding `values` (row-major) with `shape`, converted to opt.dtype.
Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions opt = {});

// Random numbers. A Generator is (seed, offset); each draw uses the current offset and advances it by one,
// and element i of a draw is a pure function of (seed, offset, i), so CPU and CUDA give the same uniform
// bits and the same seed always gives the same tensors.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) { seed_ = seed, offset_ = 0; }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  // Returns the offset to use for the next draw and advances.
  uint64_t next_offset() { return offset_++; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

// Uniform in [low, high).
Tensor rand(const Shape& shape, TensorOptions opt = {}, Generator* gen = nullptr, double low = 0.0, double high = 1.0);
// Normal(mean, std) by Box-Muller.
Tensor randn(const Shape& shape, TensorOptions opt = {}, Generator* gen = nullptr, double mean = 0.0, double std = 1.0);

}  // namespace shardrt
