#pragma once
// Arithmetic rounded one operation at a time. nvcc fuses `a * b + c` into one fused multiply-add by default, which
// rounds once instead of twice; the CPU kernels are compiled without contraction, so a kernel that promises the
// CPU's results bit for bit (pool, upsample, neighbour search) multiplies through these. Internal to kernels/cuda.

#include <cuda_runtime.h>

namespace shardrt::kernels::cuda {

__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }

}  // namespace shardrt::kernels::cuda
