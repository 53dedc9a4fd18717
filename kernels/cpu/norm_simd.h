// The vector bodies of the float layer norm (kernels/cpu/norm_simd.cpp, dispatched at run time to the best SIMD
// target). Each call handles rows [r0, r1) on the calling thread; kernels/cpu/norm.cpp threads them.
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu::simd {

// The forward of kernels/cpu/norm.h's layernorm for rows [r0, r1), in float lanes.
void layernorm_rows(int64_t r0, int64_t r1, int64_t D, const float* x, const float* weight, const float* bias,
                    float eps, float* y, float* mean, float* rstd);

// The backward of rows [r0, r1): gx (may be null) overwritten; when part_w is not null, gy * xhat and gy are added
// to the double partials part_w and part_b (length D each).
void layernorm_backward_rows(int64_t r0, int64_t r1, int64_t D, const float* x, const float* weight,
                             const float* mean, const float* rstd, const float* gy, float* gx, double* part_w,
                             double* part_b);

}  // namespace shardrt::kernels::cpu::simd
