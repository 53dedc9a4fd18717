// Layer normalisation on a CUDA device, forward and backward (groupnorm has no CUDA kernel yet).
// Contract: layernorm and layernorm_backward in kernels/cpu/norm.h (same shapes, null pointers, two-pass double
// statistics, gx overwritten, gweight and gbias accumulated). CUDA: templates over T in {float, double}; device
// pointers on the current device, which must own `stream`; queued on `stream`, never synchronises.
#pragma once
#include <cstdint>

#include "runtime/cuda_context.h"

namespace shardrt::kernels::cuda {

template <typename T>
void layernorm(int64_t rows, int64_t D, const T* x, const T* weight, const T* bias, T eps, T* y, T* mean, T* rstd,
               CudaStream stream);

// The parameter grads are summed over fixed row chunks into a scratch buffer, then the chunks are added in order,
// so they are bitwise reproducible. The scratch (at most 256 * 2 * D doubles) comes from
// shardrt::cuda_caching_allocator of the current device and is freed stream-ordered.
template <typename T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* weight, const T* mean, const T* rstd,
                        const T* gy, T* gx, T* gweight, T* gbias, CudaStream stream);

}  // namespace shardrt::kernels::cuda
