// The f32 convolution through oneDNN (Debian's libdnnl, the library PyTorch's own CPU convolution runs on), behind
// kernels/cpu/conv.h's conv_forward / conv_backward. Internal to the conv kernel; not installed.
//
// Determinism. oneDNN splits a convolution between threads by the thread count, and its weight-grad reduction
// over the batch and the image follows that split, so its bits would change with OMP_NUM_THREADS. Here the work
// is cut instead into pieces fixed by the shapes alone: output-channel groups (forward), input-channel groups
// (input grad), and output x input channel groups over bands of output rows (weight grad: conv_onednn_weights.h),
// each piece a oneDNN primitive created for ONE thread and run by one thread, so every element comes from
// single-threaded calls whatever the thread count; partial weight grads are added in a fixed order. Layout
// reorders are copies.
#pragma once

#include "kernels/cpu/conv.h"

namespace shardrt::kernels::cpu::onednn {

// Whether this build links oneDNN.
bool built();
// Whether conv_forward, conv_backward_data and conv_backward_weights of g would all run here.
bool accepts(const ConvGeometry& g);

// Each returns false, touching nothing, when oneDNN is not built in or offers no optimised kernel for g (its
// reference kernels are never used; e.g. its AVX2 weight grad has none for dilated kernels); the caller then runs
// im2col + GEMM for that output. Contracts as in conv.h: y and gx are overwritten, gw accumulated (+=). The bias
// grad is the caller's (a sum over gy in double: oneDNN's would be an f32 running sum).
bool conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y);
bool conv_backward_data(const ConvGeometry& g, const float* w, const float* gy, float* gx);
bool conv_backward_weights(const ConvGeometry& g, const float* x, const float* gy, float* gw);

}  // namespace shardrt::kernels::cpu::onednn
