// The vector bodies of softmax and log-softmax over contiguous rows (the inner == 1 case of kernels/cpu/softmax.h),
// dispatched at run time to the best SIMD target. Each call handles rows [r0, r1) of length n on the calling thread.
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu::simd {

// y = softmax (log_softmax when log) of each row; y may alias x.
void softmax_rows(bool log, int64_t r0, int64_t r1, int64_t n, const float* x, float* y);
void softmax_rows(bool log, int64_t r0, int64_t r1, int64_t n, const double* x, double* y);

// gx from the forward output y: y (gy - sum gy y), or gy - exp(y) sum gy when log; gx may alias gy.
void softmax_backward_rows(bool log, int64_t r0, int64_t r1, int64_t n, const float* y, const float* gy, float* gx);
void softmax_backward_rows(bool log, int64_t r0, int64_t r1, int64_t n, const double* y, const double* gy,
                           double* gx);

}  // namespace shardrt::kernels::cpu::simd
