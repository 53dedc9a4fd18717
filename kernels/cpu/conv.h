// N-d convolution (N = 1, 2, 3): f32 by Winograd F(2x2, 3x3) or through oneDNN where they take the shape
// (ConvImpl below), otherwise and for f64 by im2col + GEMM (the reference path, which the parity tests compare the
// others against); and the non-overlapping transposed convolution used to turn patch tokens back into a volume
// ("unpatchify").
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu {

// Shape of a convolution (also used by pooling, with c_out = c_in). Spatial dims 0..nd-1 are the tensor's
// spatial dims in order; the unused trailing dims nd..2 must hold in = out = kernel = stride = dilation = 1 and
// pad = 0, which lets every kernel work on 3-d volumes without changing the memory layout.
// Padding is symmetric: pad[d] zeros on both sides of dim d.
struct ConvGeometry {
  int nd;
  int64_t batch, c_in, c_out;
  int64_t in[3], out[3], kernel[3], stride[3], pad[3], dilation[3];
};

// Which implementation the f32 convolutions (conv_forward, conv_backward) run:
//   automatic  (the default) Winograd F(2x2, 3x3) for 3x3 stride-1 2-d kernels (kernels/cpu/conv_winograd.h),
//              oneDNN for the other kernels with overlapping windows where the build links it and it has an
//              optimised kernel for the shape (kernels/cpu/conv_onednn.h), im2col + GEMM for the rest;
//   onednn     oneDNN where it takes the shape (no Winograd), else im2col + GEMM;
//   reference  always im2col + GEMM, the path the parity tests compare the others against.
// The default can be set with SHARDRT_CPU_CONV=auto|onednn|reference (read once); set_conv_impl changes it for the
// whole process. f64 always runs the reference path. Every path gives bits that do not depend on the thread count.
enum class ConvImpl { automatic, onednn, reference };
ConvImpl conv_impl();
void set_conv_impl(ConvImpl impl);
// Whether this build links oneDNN (libdnnl); without it ConvImpl::onednn runs the reference path.
bool conv_onednn_built();

// Whether the f32 forward and backward of g run through oneDNN, or through Winograd, under the current conv_impl():
// tests use them to know which path they check.
bool conv_runs_onednn(const ConvGeometry& g);
bool conv_runs_winograd(const ConvGeometry& g);

// floor((in + 2·pad - dilation·(kernel - 1) - 1) / stride) + 1, or 0 when the dilated kernel does not fit.
int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation);

// Fills a ConvGeometry from nd-long arrays, computing out with conv_output_size and setting the unused dims.
ConvGeometry make_conv_geometry(int nd, int64_t batch, int64_t c_in, int64_t c_out, const int64_t* in,
                                const int64_t* kernel, const int64_t* stride, const int64_t* pad,
                                const int64_t* dilation);

// y (B, Cout, *out) = conv(x (B, Cin, *in), w (Cout, Cin, *kernel)) + bias (Cout, nullable).
template <typename T>
void conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y);

// Given gy (B, Cout, *out): gx (B, Cin, *in), gw (Cout, Cin, *kernel), gbias (Cout). Each output is nullable
// (skipped). gx is overwritten; gw and gbias are accumulated with += (the caller zero-fills them the first time;
// the GEMMs run with beta = 1, so accumulation costs nothing).
template <typename T>
void conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* gx, T* gw, T* gbias);

// Transposed convolution with kernel == stride and no padding: every input voxel writes its own kernel-sized
// output block, so the op is one GEMM plus a permutation.
// x (B, Cin, *in), w (Cin, Cout, *kernel) (PyTorch's ConvTranspose layout), bias (Cout, nullable)
//   -> y (B, Cout, *in·kernel).
// Reads g.batch, g.c_in, g.c_out, g.in (input extents) and g.kernel; stride, pad, dilation and out are not read.
template <typename T>
void conv_transpose_patch_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y);

// Given gy (B, Cout, *in·kernel): gx, gw, gbias as for conv_backward (nullable; gx overwritten, gw and gbias
// accumulated).
template <typename T>
void conv_transpose_patch_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* gx, T* gw,
                                   T* gbias);

}  // namespace shardrt::kernels::cpu
