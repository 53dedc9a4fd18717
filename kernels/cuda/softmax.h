// Softmax and log-softmax over the middle axis of an (outer, n, inner) contiguous view on a CUDA device.
// Contract: kernels/cpu/softmax.h (same max shift, aliasing and NaN rules). CUDA: sums accumulate in double;
// templates over T in {float, double}; device pointers on the device that owns `stream`; queued on `stream`,
// never synchronises.
#pragma once
#include <cstdint>

#include "runtime/cuda_context.h"

namespace shardrt::kernels::cuda {

template <typename T>
void softmax(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, CudaStream stream);
template <typename T>
void softmax_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx, CudaStream stream);

template <typename T>
void log_softmax(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, CudaStream stream);
template <typename T>
void log_softmax_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx,
                          CudaStream stream);

}  // namespace shardrt::kernels::cuda
