// Resampling of the spatial dims of (B, C, *in) to (B, C, *out), nd = 1, 2 or 3, with PyTorch's
// F.interpolate source-index formulas for a given output size (no scale_factor).
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu {

enum class UpsampleMode {
  // PyTorch 'nearest': src = floor(dst · in / out), computed exactly in integers.
  nearest,
  // 'linear' / 'bilinear' / 'trilinear' by nd. align_corners = true: src = dst · (in - 1) / (out - 1) (0 when
  // out == 1); false: src = max((dst + 0.5) · in / out - 0.5, 0). Interpolates between floor(src) and the next
  // index, clamped to in - 1.
  linear,
};

// planes = B·C; in and out hold nd extents. align_corners is ignored for nearest. Works for down-sampling too.
template <typename T>
void upsample_forward(UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                      const int64_t* out, const T* x, T* y);

// gx (B, C, *in), overwritten, from gy (B, C, *out): each gy element is spread over the inputs it was
// interpolated from, with the same weights. Parallel over planes, so sums do not depend on the thread count.
template <typename T>
void upsample_backward(UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                       const int64_t* out, const T* gy, T* gx);

}  // namespace shardrt::kernels::cpu
