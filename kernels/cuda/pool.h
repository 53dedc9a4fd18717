// Average and max pooling over 1-3 spatial dims on a CUDA device.
// Contract: kernels/cpu/pool.h (same ConvGeometry, count_include_pad average, -inf padding, NaN propagation, ties
// keep the first tap, argmax as the flat position within the input plane, -1 for a window wholly in the padding).
// CUDA: one thread per output element forward; the backwards gather per input element (each input position sums
// the windows that reach it in output order), so they need no atomics and are deterministic. Templates over T in
// {float, double}; device pointers on the device that owns `stream`; queued on `stream`, never synchronises.
#pragma once
#include <cstdint>

#include "kernels/cpu/conv.h"  // ConvGeometry: the window description shared by both backends
#include "runtime/cuda_context.h"

namespace shardrt::kernels::cuda {

using kernels::cpu::ConvGeometry;

template <typename T>
void avg_pool_forward(const ConvGeometry& g, const T* x, T* y, CudaStream stream);
template <typename T>
void avg_pool_backward(const ConvGeometry& g, const T* gy, T* gx, CudaStream stream);

template <typename T>
void max_pool_forward(const ConvGeometry& g, const T* x, T* y, int64_t* argmax, CudaStream stream);
template <typename T>
void max_pool_backward(const ConvGeometry& g, const T* gy, const int64_t* argmax, T* gx, CudaStream stream);

}  // namespace shardrt::kernels::cuda
