// Layer normalisation on a CUDA device, forward and backward. The CUDA twin of layernorm in kernels/cpu/norm.h:
// statistics use the biased variance, computed in two passes (mean first, then the mean squared deviation) in
// double, never as E[x^2] - E[x]^2. Templates over T in {float, double}; each call is queued on `stream` without
// synchronising, with device pointers on the current device, which must own `stream`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardrt::kernels::cuda {

// Normalises each of `rows` contiguous rows of length D: y = (x - mean) * rstd * weight + bias, with
// rstd = 1 / sqrt(var + eps). weight and bias (length D) may each be null (scale 1, shift 0). Writes the per-row
// mean and rstd (length rows) for the backward. Precondition: D >= 1.
template <typename T>
void layernorm(int64_t rows, int64_t D, const T* x, const T* weight, const T* bias, T eps, T* y, T* mean, T* rstd,
               cudaStream_t stream);

// Backward of layernorm from its saved mean and rstd. gx (rows x D) is overwritten; it may be null when the input
// needs no grad. gweight and gbias (length D) are accumulated with += (the caller zero-fills them the first time)
// and may each be null. The parameter grads are summed over fixed row chunks into a scratch buffer, then the
// chunks are added in order, so they are bitwise reproducible. The scratch (at most 256 * 2 * D doubles) comes
// from shardrt::cuda_caching_allocator of the current device and is freed stream-ordered.
template <typename T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* weight, const T* mean, const T* rstd,
                        const T* gy, T* gx, T* gweight, T* gbias, cudaStream_t stream);

}  // namespace shardrt::kernels::cuda
