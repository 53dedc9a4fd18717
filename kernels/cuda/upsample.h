// Resampling of the spatial dims of (B, C, *in) to (B, C, *out) on a CUDA device, nearest and (bi/tri)linear.
// Contract: kernels/cpu/upsample.h (PyTorch's source-index formulas for a given output size, align_corners rules,
// down-sampling allowed). CUDA: one thread per output element forward; the backward gathers per input element
// (the outputs that read an input form one contiguous range per axis, found by binary search with the forward's
// own index formula), so it needs no atomics. Products are rounded without fused multiply-adds and sums run in the
// CPU's order, so the results equal the CPU kernel's bit for bit. Templates over T in {float, double}; `in` and
// `out` are host arrays of nd extents (passed by value to the kernels); device data on the device that owns
// `stream`; queued on `stream`, never synchronises.
#pragma once
#include <cstdint>

#include "kernels/cpu/upsample.h"  // UpsampleMode, shared by both backends
#include "runtime/cuda_context.h"

namespace shardrt::kernels::cuda {

using kernels::cpu::UpsampleMode;

template <typename T>
void upsample_forward(UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                      const int64_t* out, const T* x, T* y, CudaStream stream);

template <typename T>
void upsample_backward(UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                       const int64_t* out, const T* gy, T* gx, CudaStream stream);

}  // namespace shardrt::kernels::cuda
