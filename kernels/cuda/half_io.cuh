#pragma once
// Loads and stores between a buffer element (float, double, or ShardRT's bf16 / f16 storage structs, which hold
// the same bits as __nv_bfloat16 / __half) and its accumulation type. Internal to kernels/cuda.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "runtime/half.h"

namespace shardrt::kernels::cuda {

__device__ inline float load_as_float(float v) { return v; }
__device__ inline float load_as_float(bf16 v) { return __bfloat162float(__ushort_as_bfloat16(v.bits)); }
__device__ inline float load_as_float(f16 v) { return __half2float(__ushort_as_half(v.bits)); }

// The accumulation type's value of an element: double stays double, everything else widens to float.
__device__ inline double load_acc(double v) { return v; }
__device__ inline float load_acc(float v) { return v; }
__device__ inline float load_acc(bf16 v) { return load_as_float(v); }
__device__ inline float load_acc(f16 v) { return load_as_float(v); }

// An accumulated value back into the element type, rounding to nearest even for 16-bit types.
template <typename T, typename A>
__device__ inline T store_as(A v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(static_cast<float>(v)))};
  } else if constexpr (std::is_same_v<T, f16>) {
    return f16{__half_as_ushort(__float2half_rn(static_cast<float>(v)))};
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace shardrt::kernels::cuda
