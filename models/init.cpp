#include "models/init.h"

#include <cmath>

#include "autograd/ops.h"
#include "autograd/tape.h"

namespace shardrt::models {

Tensor uniform_init(const Shape& shape, double bound, DType dtype, Generator& gen) {
  return rand(shape, {dtype}, &gen, -bound, bound);
}

Tensor normal_init(const Shape& shape, double std, DType dtype, Generator& gen) {
  return randn(shape, {dtype}, &gen, 0.0, std);
}

Tensor trunc_normal_init(const Shape& shape, double std, double lo, double hi, DType dtype, Generator& gen) {
  NoGradGuard no_grad;
  Tensor t = randn(shape, {DType::f64}, &gen, 0.0, std);
  // Resample the (rare) values outside the bounds; each round redraws only those, so this ends fast.
  for (int round = 0; round < 64; ++round) {
    double* p = t.data<double>();
    bool all_in = true;
    for (int64_t i = 0; i < t.numel(); ++i) all_in &= (p[i] >= lo && p[i] <= hi);
    if (all_in) break;
    Tensor fresh = randn(shape, {DType::f64}, &gen, 0.0, std);
    const double* q = fresh.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (p[i] < lo || p[i] > hi) p[i] = q[i];
  }
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::fmin(std::fmax(p[i], lo), hi);
  return t.to(dtype).clone();
}

}  // namespace shardrt::models
