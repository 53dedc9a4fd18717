// Reductions over the middle axis of an (outer, n, inner) contiguous view on a CUDA device.
// Contract: kernels/cpu/reduce.h (same outputs, NaN, tie and empty-row rules; sums accumulate in double). CUDA:
// deterministic, every output is reduced in an order fixed by the shape alone (no atomics); templates over T in
// {float, double}; device pointers on the device that owns `stream`; queued on `stream`, never synchronises.
// reduce_max, reduce_min and reduce_argmax write nothing when n == 0.
#pragma once
#include <cstdint>

#include "runtime/cuda_context.h"

namespace shardrt::kernels::cuda {

template <typename T>
void reduce_sum(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, CudaStream stream);
template <typename T>
void reduce_mean(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, CudaStream stream);
template <typename T>
void reduce_max(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx, CudaStream stream);
template <typename T>
void reduce_min(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx, CudaStream stream);
template <typename T>
void reduce_argmax(int64_t outer, int64_t n, int64_t inner, const T* x, int64_t* idx, CudaStream stream);
template <typename T>
void reduce_logsumexp(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, CudaStream stream);

template <typename T>
void reduce_sum_backward(int64_t outer, int64_t n, int64_t inner, const T* gy, T* gx, CudaStream stream);
template <typename T>
void reduce_mean_backward(int64_t outer, int64_t n, int64_t inner, const T* gy, T* gx, CudaStream stream);
template <typename T>
void reduce_index_backward(int64_t outer, int64_t n, int64_t inner, const int64_t* idx, const T* gy, T* gx,
                           CudaStream stream);
template <typename T>
void reduce_logsumexp_backward(int64_t outer, int64_t n, int64_t inner, const T* x, const T* y, const T* gy, T* gx,
                               CudaStream stream);

}  // namespace shardrt::kernels::cuda
