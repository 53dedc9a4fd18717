// Layer and group normalisation on a CUDA device, forward and backward (layernorm in norm.cu, groupnorm in
// group_norm.cu).
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

// ---- group normalisation (group_norm.cu) ----
// Contract: groupnorm and groupnorm_backward in kernels/cpu/norm.h (x (N, C, S), G groups of consecutive channels,
// two-pass double statistics, mean and rstd (N, G), gx overwritten, gweight and gbias accumulated). CUDA: one block
// per (sample, group) for the statistics and the input grad; the parameter grads sum per-(sample, channel) partials
// over the samples in order (scratch of 2 * N * C doubles from the caching allocator), so they are reproducible.
template <typename T>
void groupnorm(int64_t N, int64_t C, int64_t S, int64_t G, const T* x, const T* weight, const T* bias, T eps, T* y,
               T* mean, T* rstd, CudaStream stream);

template <typename T>
void groupnorm_backward(int64_t N, int64_t C, int64_t S, int64_t G, const T* x, const T* weight, const T* mean,
                        const T* rstd, const T* gy, T* gx, T* gweight, T* gbias, CudaStream stream);

}  // namespace shardrt::kernels::cuda
