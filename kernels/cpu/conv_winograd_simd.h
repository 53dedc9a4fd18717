// The tile transforms of the Winograd F(2x2, 3x3) convolution (kernels/cpu/conv_winograd.h), one row of tiles at a
// time with tiles in vector lanes, compiled per target with Highway (kernels/cpu/simd.h). Internal to the conv
// kernel; not installed.
//
// A tile row of `tiles` tiles reads input columns [2t, 2t + 4) of tile t. Every "plane" output is one of the 16
// transform points xi = 4 i + j: value xi of tile t goes to out[xi * plane + t].
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu::winograd_rows {

// Row buffers are read (and written) in whole vectors: padded to a multiple of kLanePad tiles, plus 2 columns.
constexpr int64_t kLanePad = 16;

// V = Bᵀ d B of the 4 x 4 input tiles whose rows are r0..r3 (padded row buffers).
void input(const float* r0, const float* r1, const float* r2, const float* r3, int64_t tiles, float* out,
           int64_t plane);

// Y = A y Aᵀ of the 2 x 2 tiles of rows y0, y1 (padded row buffers): the output-grad tiles of the weight grad.
void output_grad(const float* y0, const float* y1, int64_t tiles, float* out, int64_t plane);

// The 2 x 2 output tiles Aᵀ m A + bias from the 16 planes of m (m[xi * plane + t]), into the first `width` columns
// (<= 2 * tiles) of output rows o0 and o1 (o1 null: the tiles' second row is past the output).
void output(const float* m, int64_t plane, int64_t tiles, float bias, float* o0, float* o1, int64_t width);

}  // namespace shardrt::kernels::cpu::winograd_rows
