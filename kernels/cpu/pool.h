// N-d (1, 2, 3) average and max pooling over the spatial dims of (B, C, *in), with PyTorch's semantics for
// ceil_mode = false. The window is described by a ConvGeometry (see conv.h): channels are g.c_in (g.c_out is
// not read), g.out must equal conv_output_size per dim, and the usual kernel/stride/pad/dilation apply.
#pragma once
#include <cstdint>

#include "kernels/cpu/conv.h"

namespace shardrt::kernels::cpu {

// y (B, C, *out): mean over each window, padding counted as zeros (count_include_pad = true), so the divisor
// is always the kernel volume. PyTorch's AvgPool has no dilation; pass 1 to match it.
template <typename T>
void avg_pool_forward(const ConvGeometry& g, const T* x, T* y);

// gx (B, C, *in), overwritten, from gy (B, C, *out).
template <typename T>
void avg_pool_backward(const ConvGeometry& g, const T* gy, T* gx);

// y (B, C, *out): max over each window, padding acting as -inf; NaN propagates and ties keep the first position.
// argmax (B, C, *out) receives the winner's flat index within its input plane (i0·in1·in2 + i1·in2 + i2), as
// PyTorch's return_indices does.
template <typename T>
void max_pool_forward(const ConvGeometry& g, const T* x, T* y, int64_t* argmax);

// gx (B, C, *in), overwritten: each gy element is added to the input position its argmax names.
template <typename T>
void max_pool_backward(const ConvGeometry& g, const T* gy, const int64_t* argmax, T* gx);

}  // namespace shardrt::kernels::cpu
