// Convolution over 1-3 spatial dims and the non-overlapping transposed convolution ("unpatchify") on a CUDA
// device, through cuDNN.
// Contract: kernels/cpu/conv.h (same ConvGeometry, layouts, nullable outputs, gx overwritten, gw and gbias
// accumulated with +=). CUDA: cuDNN's convolution forward / backward data / backward filter / backward bias with
// the algorithm cuDNN's heuristics rank first among those that are deterministic and use no tensor-core rounding
// (FMA math: f32 stays f32, never TF32, so results match the CPU to f32 accuracy), its workspace from the caching
// allocator (stream-ordered). Descriptors and algorithm choices are made once per (device, dtype, geometry) and
// cached for the process. A 1-d convolution runs as a 2-d one with a unit axis. Extents must fit cuDNN's 32-bit
// sizes (ShapeError otherwise). Templates over T in {float, double}; device pointers on the device that owns
// `stream`; queued on `stream`, never synchronises.
#pragma once
#include <cstdint>

#include "kernels/cpu/conv.h"  // ConvGeometry, shared by both backends
#include "runtime/cuda_context.h"

namespace shardrt::kernels::cuda {

using kernels::cpu::ConvGeometry;

template <typename T>
void conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y, CudaStream stream);

template <typename T>
void conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* gx, T* gw, T* gbias,
                   CudaStream stream);

template <typename T>
void conv_transpose_patch_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y,
                                  CudaStream stream);

template <typename T>
void conv_transpose_patch_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* gx, T* gw,
                                   T* gbias, CudaStream stream);

}  // namespace shardrt::kernels::cuda
