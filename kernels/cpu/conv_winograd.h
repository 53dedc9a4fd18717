// Winograd F(2x2, 3x3) for the f32 3x3 stride-1 convolutions (GALE's projections, most 3x3 layers): 2 x 2 output
// tiles from 4 x 4 input tiles, 16 multiplies per tile and channel pair instead of 36, so 2.25x fewer
// multiply-adds than a direct or im2col convolution. The 16 multiplies of all tiles are 16 GEMMs over channels
// (kernels/cpu/gemm.h, our fixed tiling); the transforms around them are vector code (conv_winograd_simd.h).
//   forward        y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A per tile, summed over input channels by the GEMMs
//   input grad     the same algorithm on gy with the kernel rotated by 180 degrees and its channels swapped
//                  (stride 1: the input grad is the full correlation of gy), padding 2 - p
//   weight grad    the transpose of the forward's bilinear form: dg = Gᵀ [ sum over tiles (A dy Aᵀ) ⊙ (Bᵀ d B) ] G,
//                  the tile sums as 16 GEMMs with the tiles as the contracted dim
// Work is cut into chunks of tile rows fixed by the shapes, one single-threaded GEMM per chunk and point, the
// weight grad's chunk sums added in a fixed order: results do not depend on the thread count. The transforms'
// coefficients are 0, +-1 and +-1/2, so the rounding stays near the direct convolution's (tests bound it beside
// the im2col path's). Internal to the conv kernel.
#pragma once
#include "kernels/cpu/conv.h"

namespace shardrt::kernels::cpu::winograd {

// 2-d, kernel 3 x 3, stride 1, no dilation, padding at most 2 per dim (so that the input grad's 2 - p is >= 0),
// every extent positive.
bool takes(const ConvGeometry& g);

// Contracts as conv.h's conv_forward / conv_backward: y and gx overwritten, gw accumulated (+=).
void conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y);
void conv_backward_data(const ConvGeometry& g, const float* w, const float* gy, float* gx);
void conv_backward_weights(const ConvGeometry& g, const float* x, const float* gy, float* gw);

}  // namespace shardrt::kernels::cpu::winograd
