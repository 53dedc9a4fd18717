// Softmax and log-softmax over the middle axis of an (outer, n, inner) contiguous view on a CUDA device,
// max-shifted so large inputs do not overflow. The CUDA twin of kernels/cpu/softmax.h: as there (and in PyTorch),
// a slice that is entirely -inf (or holds +inf or NaN) gives NaN. Sums accumulate in double. Templates over T in
// {float, double}; each call is queued on `stream` without synchronising, with device pointers on the device that
// owns `stream`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardrt::kernels::cuda {

// y[o, k, j] = exp(x[o, k, j]) / sum_k' exp(x[o, k', j]). y may alias x.
template <typename T>
void softmax(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t stream);

// gx = y * (gy - sum_k gy * y), from the forward output y. gx may alias gy.
template <typename T>
void softmax_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx, cudaStream_t stream);

// y = x - log sum_k exp(x). y may alias x.
template <typename T>
void log_softmax(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t stream);

// gx = gy - exp(y) * sum_k gy, from the forward output y. gx may alias gy.
template <typename T>
void log_softmax_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx,
                          cudaStream_t stream);

}  // namespace shardrt::kernels::cuda
