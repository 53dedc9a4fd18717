#include "kernels/cpu/conv.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace shardrt::kernels::cpu {
namespace {

// Below this many elements touched an OpenMP region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;
// Largest im2col chunk, in elements: bounds the scratch memory for large 3-d volumes (the full im2col matrix
// of a 64³ volume with 64 channels and a 3³ kernel would be 450M elements) while keeping each GEMM wide.
constexpr int64_t kColumnBudget = int64_t(1) << 20;

int64_t volume(const int64_t* dims) { return dims[0] * dims[1] * dims[2]; }

// A 1×1×1 kernel with stride 1 and no padding reads each input voxel once: the input itself is the im2col matrix.
bool is_pointwise(const ConvGeometry& g) {
  for (int d = 0; d < 3; ++d)
    if (g.kernel[d] != 1 || g.stride[d] != 1 || g.pad[d] != 0) return false;
  return true;
}

// How many of `cols` GEMM columns to process at once so that a (rows × chunk) scratch fits the budget.
int64_t chunk_columns(int64_t rows, int64_t cols) {
  return std::clamp<int64_t>(kColumnBudget / std::max<int64_t>(rows, 1), 1, std::max<int64_t>(cols, 1));
}

// For output positions [p0, p0 + np) and each kernel tap k: the offset, within one input channel, of the voxel
// the tap reads, or -1 where it lands in the zero padding. Row-major (taps × np); shared by every channel and
// sample, so im2col and col2im reduce to a gather and a scatter.
std::vector<int64_t> tap_sources(const ConvGeometry& g, int64_t p0, int64_t np) {
  const int64_t taps = volume(g.kernel);
  std::vector<int64_t> sources(taps * np);
#pragma omp parallel for if (taps * np > kParallelWork) schedule(static)
  for (int64_t k = 0; k < taps; ++k) {
    const int64_t tap[3] = {k / (g.kernel[1] * g.kernel[2]), (k / g.kernel[2]) % g.kernel[1], k % g.kernel[2]};
    for (int64_t j = 0; j < np; ++j) {
      const int64_t p = p0 + j;
      const int64_t o[3] = {p / (g.out[1] * g.out[2]), (p / g.out[2]) % g.out[1], p % g.out[2]};
      int64_t offset = 0;
      for (int d = 0; d < 3; ++d) {
        const int64_t i = o[d] * g.stride[d] - g.pad[d] + tap[d] * g.dilation[d];
        if (i < 0 || i >= g.in[d]) {
          offset = -1;
          break;
        }
        offset = offset * g.in[d] + i;
      }
      sources[k * np + j] = offset;
    }
  }
  return sources;
}

// col (channels·taps × np) gathered from one sample xb (channels, in_vol).
template <typename T>
void im2col(int64_t channels, int64_t in_vol, int64_t taps, int64_t np, const int64_t* sources, const T* xb,
            T* col) {
#pragma omp parallel for if (channels * taps * np > kParallelWork) schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    const T* xc = xb + c * in_vol;
    for (int64_t k = 0; k < taps; ++k) {
      const int64_t* src = sources + k * np;
      T* row = col + (c * taps + k) * np;
      for (int64_t j = 0; j < np; ++j) row[j] = src[j] >= 0 ? xc[src[j]] : T(0);
    }
  }
}

// Adjoint of im2col: gxb (channels, in_vol) += scatter of col. Parallel over channels only, since taps of one
// channel overlap; each channel is summed by one thread in a fixed order.
template <typename T>
void col2im(int64_t channels, int64_t in_vol, int64_t taps, int64_t np, const int64_t* sources, const T* col,
            T* gxb) {
#pragma omp parallel for if (channels * taps * np > kParallelWork) schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    T* gxc = gxb + c * in_vol;
    for (int64_t k = 0; k < taps; ++k) {
      const int64_t* src = sources + k * np;
      const T* row = col + (c * taps + k) * np;
      for (int64_t j = 0; j < np; ++j)
        if (src[j] >= 0) gxc[src[j]] += row[j];
    }
  }
}

// y (batch, channels, vol) += bias per channel.
template <typename T>
void add_bias(int64_t batch, int64_t channels, int64_t vol, const T* bias, T* y) {
#pragma omp parallel for if (batch * channels * vol > kParallelWork) schedule(static)
  for (int64_t bc = 0; bc < batch * channels; ++bc) {
    const T b = bias[bc % channels];
    T* row = y + bc * vol;
    for (int64_t p = 0; p < vol; ++p) row[p] += b;
  }
}

// gbias[c] += Σ over batch and positions of gy (batch, channels, vol), the sum taken in double.
template <typename T>
void bias_grad(int64_t batch, int64_t channels, int64_t vol, const T* gy, T* gbias) {
#pragma omp parallel for if (batch * channels * vol > kParallelWork) schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const T* row = gy + (b * channels + c) * vol;
      for (int64_t p = 0; p < vol; ++p) sum += row[p];
    }
    gbias[c] += T(sum);
  }
}

// Where the transposed-patch GEMM result goes: input voxel p0 + j, kernel tap k lands at base[j] + tap[k] within
// one output channel of extents in·kernel.
struct PatchOffsets {
  std::vector<int64_t> base, tap;
};

PatchOffsets patch_offsets(const ConvGeometry& g, int64_t p0, int64_t np) {
  const int64_t out[3] = {g.in[0] * g.kernel[0], g.in[1] * g.kernel[1], g.in[2] * g.kernel[2]};
  PatchOffsets offsets{std::vector<int64_t>(np), std::vector<int64_t>(volume(g.kernel))};
  for (int64_t j = 0; j < np; ++j) {
    const int64_t p = p0 + j;
    const int64_t i[3] = {p / (g.in[1] * g.in[2]), (p / g.in[2]) % g.in[1], p % g.in[2]};
    offsets.base[j] = ((i[0] * g.kernel[0]) * out[1] + i[1] * g.kernel[1]) * out[2] + i[2] * g.kernel[2];
  }
  for (int64_t k = 0; k < volume(g.kernel); ++k) {
    const int64_t a[3] = {k / (g.kernel[1] * g.kernel[2]), (k / g.kernel[2]) % g.kernel[1], k % g.kernel[2]};
    offsets.tap[k] = (a[0] * out[1] + a[1]) * out[2] + a[2];
  }
  return offsets;
}

// What the GEMMs read for output positions [p0, p0 + np) of sample xb, and its leading dimension: xb itself for a
// pointwise conv (no copy), else the chunk's im2col in `col`.
template <typename T>
std::pair<const T*, int64_t> conv_columns(const ConvGeometry& g, bool pointwise, int64_t p0, int64_t np,
                                          const std::vector<int64_t>& sources, const T* xb, T* col) {
  const int64_t in_vol = volume(g.in);
  if (pointwise) return {xb + p0, in_vol};
  im2col(g.c_in, in_vol, volume(g.kernel), np, sources.data(), xb, col);
  return {col, np};
}

}  // namespace

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

ConvGeometry make_conv_geometry(int nd, int64_t batch, int64_t c_in, int64_t c_out, const int64_t* in,
                                const int64_t* kernel, const int64_t* stride, const int64_t* pad,
                                const int64_t* dilation) {
  ConvGeometry g{nd, batch, c_in, c_out, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}};
  for (int d = 0; d < nd; ++d) {
    g.in[d] = in[d];
    g.kernel[d] = kernel[d];
    g.stride[d] = stride[d];
    g.pad[d] = pad[d];
    g.dilation[d] = dilation[d];
    g.out[d] = conv_output_size(in[d], kernel[d], stride[d], pad[d], dilation[d]);
  }
  return g;
}

template <typename T>
void conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t in_vol = volume(g.in), out_vol = volume(g.out), taps = volume(g.kernel);
  const int64_t rows = g.c_in * taps;
  const bool pointwise = is_pointwise(g);
  const int64_t chunk = pointwise ? out_vol : chunk_columns(rows, out_vol);
  std::vector<T> col(pointwise ? 0 : rows * std::min(chunk, out_vol));

  for (int64_t p0 = 0; p0 < out_vol; p0 += chunk) {
    const int64_t np = std::min(chunk, out_vol - p0);
    const std::vector<int64_t> sources = pointwise ? std::vector<int64_t>() : tap_sources(g, p0, np);
    for (int64_t b = 0; b < g.batch; ++b) {
      const auto [cols, ld_cols] = conv_columns(g, pointwise, p0, np, sources, x + b * g.c_in * in_vol, col.data());
      gemm(false, false, g.c_out, np, rows, T(1), w, rows, cols, ld_cols, T(0), y + b * g.c_out * out_vol + p0,
           out_vol);
    }
  }
  if (bias) add_bias(g.batch, g.c_out, out_vol, bias, y);
}

template <typename T>
void conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* gx, T* gw, T* gbias) {
  const int64_t in_vol = volume(g.in), out_vol = volume(g.out), taps = volume(g.kernel);
  const int64_t rows = g.c_in * taps;
  const bool pointwise = is_pointwise(g);
  const int64_t chunk = pointwise ? out_vol : chunk_columns(rows, out_vol);

  if (gbias) bias_grad(g.batch, g.c_out, out_vol, gy, gbias);
  // The pointwise gx is written whole by one GEMM per sample; otherwise col2im accumulates into it.
  if (gx && !pointwise) std::fill(gx, gx + g.batch * g.c_in * in_vol, T(0));
  if (!gx && !gw) return;

  const int64_t scratch = pointwise ? 0 : rows * std::min(chunk, out_vol);
  std::vector<T> col(gw ? scratch : 0), grad_col(gx ? scratch : 0);
  for (int64_t p0 = 0; p0 < out_vol; p0 += chunk) {
    const int64_t np = std::min(chunk, out_vol - p0);
    const std::vector<int64_t> sources = pointwise ? std::vector<int64_t>() : tap_sources(g, p0, np);
    for (int64_t b = 0; b < g.batch; ++b) {
      const T* xb = x + b * g.c_in * in_vol;
      const T* gyb = gy + b * g.c_out * out_vol + p0;
      T* gxb = gx ? gx + b * g.c_in * in_vol : nullptr;
      if (gw) {
        // gw (Cout × Cin·taps) += gy_chunk · colᵀ
        const auto [cols, ld_cols] = conv_columns(g, pointwise, p0, np, sources, xb, col.data());
        gemm(false, true, g.c_out, rows, np, T(1), gyb, out_vol, cols, ld_cols, T(1), gw, rows);
      }
      if (gx && pointwise) {
        gemm(true, false, g.c_in, np, g.c_out, T(1), w, rows, gyb, out_vol, T(0), gxb + p0, in_vol);
      } else if (gx) {
        // grad_col = wᵀ · gy_chunk, then scattered back onto the input voxels it was gathered from.
        gemm(true, false, rows, np, g.c_out, T(1), w, rows, gyb, out_vol, T(0), grad_col.data(), np);
        col2im(g.c_in, in_vol, taps, np, sources.data(), grad_col.data(), gxb);
      }
    }
  }
}

template <typename T>
void conv_transpose_patch_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t in_vol = volume(g.in), taps = volume(g.kernel);
  const int64_t out_vol = in_vol * taps;
  const int64_t rows = g.c_out * taps;
  const int64_t chunk = chunk_columns(rows, in_vol);
  std::vector<T> blocks(rows * std::min(chunk, in_vol));

  for (int64_t p0 = 0; p0 < in_vol; p0 += chunk) {
    const int64_t np = std::min(chunk, in_vol - p0);
    const PatchOffsets offsets = patch_offsets(g, p0, np);
    for (int64_t b = 0; b < g.batch; ++b) {
      // blocks (Cout·taps × np) = wᵀ · x_chunk: column j is the whole output block of input voxel p0 + j.
      gemm(true, false, rows, np, g.c_in, T(1), w, rows, x + b * g.c_in * in_vol + p0, in_vol, T(0), blocks.data(),
           np);
      T* yb = y + b * g.c_out * out_vol;
#pragma omp parallel for if (rows * np > kParallelWork) schedule(static)
      for (int64_t co = 0; co < g.c_out; ++co) {
        const T shift = bias ? bias[co] : T(0);
        T* yc = yb + co * out_vol;
        for (int64_t k = 0; k < taps; ++k) {
          const T* row = blocks.data() + (co * taps + k) * np;
          T* yk = yc + offsets.tap[k];
          for (int64_t j = 0; j < np; ++j) yk[offsets.base[j]] = row[j] + shift;
        }
      }
    }
  }
}

template <typename T>
void conv_transpose_patch_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* gx, T* gw,
                                   T* gbias) {
  const int64_t in_vol = volume(g.in), taps = volume(g.kernel);
  const int64_t out_vol = in_vol * taps;
  const int64_t rows = g.c_out * taps;
  const int64_t chunk = chunk_columns(rows, in_vol);

  if (gbias) bias_grad(g.batch, g.c_out, out_vol, gy, gbias);
  if (!gx && !gw) return;

  std::vector<T> grad_blocks(rows * std::min(chunk, in_vol));
  for (int64_t p0 = 0; p0 < in_vol; p0 += chunk) {
    const int64_t np = std::min(chunk, in_vol - p0);
    const PatchOffsets offsets = patch_offsets(g, p0, np);
    for (int64_t b = 0; b < g.batch; ++b) {
      const T* gyb = gy + b * g.c_out * out_vol;
#pragma omp parallel for if (rows * np > kParallelWork) schedule(static)
      for (int64_t co = 0; co < g.c_out; ++co) {
        const T* gyc = gyb + co * out_vol;
        for (int64_t k = 0; k < taps; ++k) {
          T* row = grad_blocks.data() + (co * taps + k) * np;
          const T* gyk = gyc + offsets.tap[k];
          for (int64_t j = 0; j < np; ++j) row[j] = gyk[offsets.base[j]];
        }
      }
      const int64_t x_offset = b * g.c_in * in_vol + p0;
      if (gx) gemm(false, false, g.c_in, np, rows, T(1), w, rows, grad_blocks.data(), np, T(0), gx + x_offset, in_vol);
      if (gw) gemm(false, true, g.c_in, rows, np, T(1), x + x_offset, in_vol, grad_blocks.data(), np, T(1), gw, rows);
    }
  }
}

#define SHARDRT_INSTANTIATE(T)                                                                                 \
  template void conv_forward<T>(const ConvGeometry&, const T*, const T*, const T*, T*);                        \
  template void conv_backward<T>(const ConvGeometry&, const T*, const T*, const T*, T*, T*, T*);               \
  template void conv_transpose_patch_forward<T>(const ConvGeometry&, const T*, const T*, const T*, T*);        \
  template void conv_transpose_patch_backward<T>(const ConvGeometry&, const T*, const T*, const T*, T*, T*, T*);
SHARDRT_INSTANTIATE(float)
SHARDRT_INSTANTIATE(double)
#undef SHARDRT_INSTANTIATE

}  // namespace shardrt::kernels::cpu
