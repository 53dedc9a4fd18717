// The elementwise optimizer updates in SIMD lanes (optim/update_simd.cpp, dispatched at run time to the best target
// the CPU has, the pattern of kernels/cpu/simd.h). Each call runs one contiguous chunk on the calling thread; the
// callers (adamw.cpp, sgd.cpp) cut the work into shape-only chunks and thread them. Every lane does exactly the
// scalar formula's IEEE operations in the scalar order (no fused multiply-add), so the result is bit for bit the
// scalar loop's on every target and thread count.
#pragma once
#include <cstdint>

namespace shardrt::optim::simd {

// AdamW (optim/adamw.h) on n elements with the step's constants precomputed in T:
//   p *= decay; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g; p -= step_size m / (sqrt(v) / sqrt_bc2 + eps).
template <class T>
struct AdamWConstants {
  T decay, b1, one_minus_b1, b2, one_minus_b2, step_size, sqrt_bc2, eps;
};
void adamw_chunk(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConstants<float>& c);
void adamw_chunk(double* p, const double* g, double* m, double* v, int64_t n, const AdamWConstants<double>& c);

// SGD (optim/sgd.h): d = g + wd p; with momentum, buf = first ? d : mu buf + keep d and d = nesterov ? d + mu buf :
// buf; p -= rate d. `buf` is unused (may be null) when momentum is off.
template <class T>
struct SGDConstants {
  T wd, mu, keep, rate;
  bool momentum, first, nesterov;
};
void sgd_chunk(float* p, const float* g, float* buf, int64_t n, const SGDConstants<float>& c);
void sgd_chunk(double* p, const double* g, double* buf, int64_t n, const SGDConstants<double>& c);

}  // namespace shardrt::optim::simd
