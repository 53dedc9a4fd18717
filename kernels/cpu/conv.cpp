#include "kernels/cpu/conv.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/conv_onednn.h"
#include "kernels/cpu/conv_simd.h"
#include "kernels/cpu/conv_winograd.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"

namespace shardrt::kernels::cpu {
namespace {

// Below this many elements touched an OpenMP region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;
// Largest im2col chunk, in elements: bounds the scratch memory for large 3-d volumes (the full im2col matrix
// of a 64³ volume with 64 channels and a 3³ kernel would be 450M elements) while keeping each GEMM wide.
constexpr int64_t kColumnBudget = int64_t(1) << 20;

// Forward column tiles: as many output positions as keep one tile's im2col (Cin·taps × tile) in a core's L2 cache
// between im2col writing it and its GEMM reading it (a 4 MiB chunk of the whole budget goes out to L3 and back,
// and OpenBLAS then copies it once more into its own panels). Tiles run in parallel, one single-threaded GEMM
// each (OpenBLAS runs single-threaded inside an OpenMP region), so a tile's result does not depend on the thread
// count, and no GEMM has to be split over threads at M = Cout.
constexpr int64_t kTileBytes = int64_t(384) << 10;

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

// im2col and col2im work on runs: the output positions of a chunk split into pieces of one output row (fixed
// o0, o1, a range of o2). For a kernel tap, a run reads one input row at a fixed step, so packing is a copy (a
// memcpy at stride 1) with zero fill at the borders, and no per-element index arithmetic or index tables.
struct OutputRun {
  int64_t o0, o1, w_begin, w_end, col;  // col: the run's first column within the chunk
};

std::vector<OutputRun> output_runs(const ConvGeometry& g, int64_t p0, int64_t np) {
  std::vector<OutputRun> runs;
  for (int64_t p = p0; p < p0 + np;) {
    const int64_t row = p / g.out[2], w = p % g.out[2];
    const int64_t w_end = std::min(g.out[2], w + (p0 + np - p));
    runs.push_back({row / g.out[1], row % g.out[1], w, w_end, p - p0});
    p += w_end - w;
  }
  return runs;
}

// Along the last dim, tap a2 of output column ow reads input column ow·stride + shift; it is inside the input
// for ow in [lo, hi) (before clamping to a run).
struct TapColumns {
  int64_t shift, lo, hi;
};

TapColumns tap_columns(const ConvGeometry& g, int64_t a2) {
  const int64_t s = g.stride[2], shift = a2 * g.dilation[2] - g.pad[2];
  const int64_t lo = shift >= 0 ? 0 : (-shift + s - 1) / s;
  const int64_t last = g.in[2] - 1 - shift;  // ow·s <= last
  const int64_t hi = last < 0 ? 0 : last / s + 1;
  return {shift, lo, std::max(lo, hi)};
}

// Kernels with fewer than 3 spatial dims keep unit trailing dims (see ConvGeometry). Moving the real dims to
// the end gives the same flat layout and makes the last dim the long one the runs follow.
ConvGeometry right_aligned(const ConvGeometry& g) {
  ConvGeometry r = g;
  const int shift = 3 - g.nd;
  for (int d = 0; d < 3; ++d) {
    const int from = d - shift;
    const bool real = from >= 0;
    r.in[d] = real ? g.in[from] : 1;
    r.out[d] = real ? g.out[from] : 1;
    r.kernel[d] = real ? g.kernel[from] : 1;
    r.stride[d] = real ? g.stride[from] : 1;
    r.pad[d] = real ? g.pad[from] : 0;
    r.dilation[d] = real ? g.dilation[from] : 1;
  }
  return r;
}

// Every input voxel is read by at most one (position, tap) pair: kernel == stride, no padding, no dilation
// (patchify). col2im then stores instead of adding.
bool reads_each_voxel_once(const ConvGeometry& g) {
  for (int d = 0; d < 3; ++d)
    if (g.kernel[d] != g.stride[d] || g.pad[d] != 0 || (g.kernel[d] > 1 && g.dilation[d] != 1)) return false;
  return true;
}

// Every input voxel is read at least once with kernel == stride: the patches tile the input exactly.
bool patches_cover_input(const ConvGeometry& g) {
  for (int d = 0; d < 3; ++d)
    if (g.out[d] * g.kernel[d] != g.in[d]) return false;
  return true;
}

// Calls f(channel, tap, a0, a1, a2) for every row of the im2col matrix, in parallel when the chunk is large and
// the caller is not already one of several threads.
template <class F>
void for_each_col_row(const ConvGeometry& g, int64_t channels, int64_t np, bool parallel, F f) {
  const int64_t taps = volume(g.kernel);
#pragma omp parallel for if (parallel && channels * taps * np > kParallelWork) schedule(static)
  for (int64_t ck = 0; ck < channels * taps; ++ck) {
    const int64_t c = ck / taps, k = ck % taps;
    f(c, k, k / (g.kernel[1] * g.kernel[2]), (k / g.kernel[2]) % g.kernel[1], k % g.kernel[2]);
  }
}

// col (channels·taps × np) gathered from one sample xb (channels, in_vol), g right-aligned.
template <typename T>
void im2col(const ConvGeometry& g, const std::vector<OutputRun>& runs, int64_t np, const T* xb, T* col,
            bool parallel = true) {
  const int64_t in_vol = volume(g.in), taps = volume(g.kernel), step = g.stride[2];
  for_each_col_row(g, g.c_in, np, parallel, [&](int64_t c, int64_t k, int64_t a0, int64_t a1, int64_t a2) {
    const T* xc = xb + c * in_vol;
    T* row = col + (c * taps + k) * np;
    const TapColumns tc = tap_columns(g, a2);
    for (const OutputRun& r : runs) {
      T* dst = row + r.col;
      const int64_t i0 = r.o0 * g.stride[0] - g.pad[0] + a0 * g.dilation[0];
      const int64_t i1 = r.o1 * g.stride[1] - g.pad[1] + a1 * g.dilation[1];
      if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1]) {
        std::fill(dst, dst + (r.w_end - r.w_begin), T(0));
        continue;
      }
      const int64_t lo = std::clamp(tc.lo, r.w_begin, r.w_end), hi = std::clamp(tc.hi, lo, r.w_end);
      std::fill(dst, dst + (lo - r.w_begin), T(0));
      const T* src = xc + (i0 * g.in[1] + i1) * g.in[2] + tc.shift;
      T* out = dst - r.w_begin;
      if (step == 1) {
        std::memcpy(out + lo, src + lo, sizeof(T) * (hi - lo));
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) out[ow] = src[ow * step];
      }
      std::fill(out + hi, out + r.w_end, T(0));
    }
  });
}

// Adjoint of im2col: gxb (channels, in_vol) += scatter of col, g right-aligned. Taps of one channel overlap, so
// it runs in parallel over channels only and each channel is summed by one thread in a fixed order, except
// when every voxel is read once (patchify): then each col row is stored to its own voxels, in parallel.
template <typename T>
void col2im(const ConvGeometry& g, const std::vector<OutputRun>& runs, int64_t np, const T* col, T* gxb) {
  const int64_t in_vol = volume(g.in), taps = volume(g.kernel), step = g.stride[2];
  const bool store = reads_each_voxel_once(g);
  auto scatter_row = [&](int64_t c, int64_t k, int64_t a0, int64_t a1, int64_t a2) {
    T* gxc = gxb + c * in_vol;
    const T* row = col + (c * taps + k) * np;
    const TapColumns tc = tap_columns(g, a2);
    for (const OutputRun& r : runs) {
      const int64_t i0 = r.o0 * g.stride[0] - g.pad[0] + a0 * g.dilation[0];
      const int64_t i1 = r.o1 * g.stride[1] - g.pad[1] + a1 * g.dilation[1];
      if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1]) continue;
      const int64_t lo = std::clamp(tc.lo, r.w_begin, r.w_end), hi = std::clamp(tc.hi, lo, r.w_end);
      T* dst = gxc + (i0 * g.in[1] + i1) * g.in[2] + tc.shift;
      const T* src = row + r.col - r.w_begin;
      if (store) {
        for (int64_t ow = lo; ow < hi; ++ow) dst[ow * step] = src[ow];
      } else if (step == 1) {
        conv_rows::add_to(dst + lo, src + lo, hi - lo);
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) dst[ow * step] += src[ow];
      }
    }
  };
  if (store) {
    for_each_col_row(g, g.c_in, np, true, scatter_row);
    return;
  }
#pragma omp parallel for if (g.c_in * taps * np > kParallelWork) schedule(static)
  for (int64_t c = 0; c < g.c_in; ++c)
    for (int64_t k = 0; k < taps; ++k)
      scatter_row(c, k, k / (g.kernel[1] * g.kernel[2]), (k / g.kernel[2]) % g.kernel[1], k % g.kernel[2]);
}

// y (batch, channels, vol) = bias per channel: the forward GEMM then adds onto it (beta = 1), which saves the
// separate read-modify-write pass a bias added afterwards would cost.
template <typename T>
void fill_bias(int64_t batch, int64_t channels, int64_t vol, const T* bias, T* y) {
#pragma omp parallel for if (batch * channels * vol > kParallelWork) schedule(static)
  for (int64_t bc = 0; bc < batch * channels; ++bc) std::fill(y + bc * vol, y + (bc + 1) * vol, bias[bc % channels]);
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
                                          const std::vector<OutputRun>& runs, const T* xb, T* col) {
  if (pointwise) return {xb + p0, volume(g.in)};
  im2col(g, runs, np, xb, col);
  return {col, np};
}

ConvImpl impl_from_env() {
  const char* env = std::getenv("SHARDRT_CPU_CONV");
  const std::string v = env ? env : "";
  return v == "reference" ? ConvImpl::reference : v == "onednn" ? ConvImpl::onednn : ConvImpl::automatic;
}

std::atomic<ConvImpl>& current_impl() {
  static std::atomic<ConvImpl> impl{impl_from_env()};
  return impl;
}

// Winograd takes f32 3x3 stride-1 convolutions under ConvImpl::automatic.
template <typename T>
bool runs_winograd(const ConvGeometry& geometry) {
  return std::is_same_v<T, float> && conv_impl() == ConvImpl::automatic && winograd::takes(geometry);
}

// oneDNN runs the other f32 convolutions whose windows overlap. Where every input voxel is read once (pointwise and
// patchify kernels) im2col is a plain copy or nothing, and im2col + GEMM measured faster than oneDNN (ViT's 8x8
// stride-8 patch embedding, 3 -> 384 channels: 0.63 against 0.92 ms forward, 0.72 against 1.18 ms weight grad).
template <typename T>
bool runs_onednn(const ConvGeometry& geometry, const ConvGeometry& right_aligned_geometry) {
  return std::is_same_v<T, float> && conv_impl() != ConvImpl::reference && !runs_winograd<T>(geometry) &&
         !reads_each_voxel_once(right_aligned_geometry);
}

}  // namespace

ConvImpl conv_impl() { return current_impl().load(); }
void set_conv_impl(ConvImpl impl) { current_impl().store(impl); }
bool conv_onednn_built() { return onednn::built(); }
bool conv_runs_onednn(const ConvGeometry& g) { return runs_onednn<float>(g, right_aligned(g)) && onednn::accepts(g); }
bool conv_runs_winograd(const ConvGeometry& g) { return runs_winograd<float>(g); }

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
void conv_forward(const ConvGeometry& geometry, const T* x, const T* w, const T* bias, T* y) {
  const ConvGeometry g = right_aligned(geometry);
  if constexpr (std::is_same_v<T, float>) {
    if (runs_winograd<T>(geometry)) return winograd::conv_forward(geometry, x, w, bias, y);
    if (runs_onednn<T>(geometry, g) && onednn::conv_forward(geometry, x, w, bias, y)) return;
  }
  const int64_t in_vol = volume(g.in), out_vol = volume(g.out), taps = volume(g.kernel);
  const int64_t rows = g.c_in * taps;
  if (is_pointwise(g)) {
    // The input is the im2col matrix: one GEMM per sample, threaded by the BLAS.
    if (bias) fill_bias(g.batch, g.c_out, out_vol, bias, y);
    for (int64_t b = 0; b < g.batch; ++b) {
      gemm(false, false, g.c_out, out_vol, rows, T(1), w, rows, x + b * g.c_in * in_vol, in_vol, bias ? T(1) : T(0),
           y + b * g.c_out * out_vol, out_vol);
    }
    return;
  }
  const int64_t tile = std::clamp<int64_t>(kTileBytes / static_cast<int64_t>(rows * sizeof(T)), 16,
                                           std::max<int64_t>(out_vol, 1));
  const int64_t tiles = (out_vol + tile - 1) / tile, work = g.batch * tiles;
#pragma omp parallel if (work > 1 && g.batch * rows * out_vol > kParallelWork)
  {
    Scratch<T> col(rows * std::min(tile, out_vol));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < work; ++i) {
      const int64_t b = i / tiles, p0 = (i % tiles) * tile, np = std::min(tile, out_vol - p0);
      im2col(g, output_runs(g, p0, np), np, x + b * g.c_in * in_vol, col.data(), /*parallel=*/false);
      T* yt = y + b * g.c_out * out_vol + p0;
      gemm(false, false, g.c_out, np, rows, T(1), w, rows, col.data(), np, T(0), yt, out_vol);
      // The bias goes onto the tile while it is still in cache, instead of a separate pass over y before.
      if (bias) {
        for (int64_t co = 0; co < g.c_out; ++co) {
          T* row = yt + co * out_vol;
          const T shift = bias[co];
          for (int64_t j = 0; j < np; ++j) row[j] += shift;
        }
      }
    }
  }
}

template <typename T>
void conv_backward(const ConvGeometry& geometry, const T* x, const T* w, const T* gy, T* gx, T* gw, T* gbias) {
  const ConvGeometry g = right_aligned(geometry);
  const int64_t in_vol = volume(g.in), out_vol = volume(g.out), taps = volume(g.kernel);
  if constexpr (std::is_same_v<T, float>) {
    if (runs_winograd<T>(geometry)) {
      if (gx) winograd::conv_backward_data(geometry, w, gy, gx);
      if (gw) winograd::conv_backward_weights(geometry, x, gy, gw);
      if (gbias) bias_grad(g.batch, g.c_out, out_vol, gy, gbias);
      return;
    }
    if (runs_onednn<T>(geometry, g)) {
      // What oneDNN declines (a shape it has no fast kernel for) stays for the im2col path below.
      if (gx && onednn::conv_backward_data(geometry, w, gy, gx)) gx = nullptr;
      if (gw && onednn::conv_backward_weights(geometry, x, gy, gw)) gw = nullptr;
      if (gbias) bias_grad(g.batch, g.c_out, out_vol, gy, gbias);
      gbias = nullptr;
    }
  }
  const int64_t rows = g.c_in * taps;
  const bool pointwise = is_pointwise(g);
  const int64_t chunk = pointwise ? out_vol : chunk_columns(rows, out_vol);

  if (gbias) bias_grad(g.batch, g.c_out, out_vol, gy, gbias);
  // The pointwise gx is written whole by one GEMM per sample, and patches that tile the input store every voxel
  // once; otherwise col2im accumulates into gx, or leaves voxels no patch reads, which must read 0.
  const bool gx_written_whole = pointwise || (reads_each_voxel_once(g) && patches_cover_input(g));
  if (gx && !gx_written_whole) std::fill(gx, gx + g.batch * g.c_in * in_vol, T(0));
  if (!gx && !gw) return;

  const int64_t scratch = pointwise ? 0 : rows * std::min(chunk, out_vol);
  Scratch<T> col(gw ? scratch : 0), grad_col(gx ? scratch : 0);
  for (int64_t p0 = 0; p0 < out_vol; p0 += chunk) {
    const int64_t np = std::min(chunk, out_vol - p0);
    const std::vector<OutputRun> runs = pointwise ? std::vector<OutputRun>() : output_runs(g, p0, np);
    for (int64_t b = 0; b < g.batch; ++b) {
      const T* xb = x + b * g.c_in * in_vol;
      const T* gyb = gy + b * g.c_out * out_vol + p0;
      T* gxb = gx ? gx + b * g.c_in * in_vol : nullptr;
      if (gw) {
        // gw (Cout × Cin·taps) += gy_chunk · colᵀ
        const auto [cols, ld_cols] = conv_columns(g, pointwise, p0, np, runs, xb, col.data());
        gemm(false, true, g.c_out, rows, np, T(1), gyb, out_vol, cols, ld_cols, T(1), gw, rows);
      }
      if (gx && pointwise) {
        gemm(true, false, g.c_in, np, g.c_out, T(1), w, rows, gyb, out_vol, T(0), gxb + p0, in_vol);
      } else if (gx) {
        // grad_col = wᵀ · gy_chunk, then scattered back onto the input voxels it was gathered from.
        gemm(true, false, rows, np, g.c_out, T(1), w, rows, gyb, out_vol, T(0), grad_col.data(), np);
        col2im(g, runs, np, grad_col.data(), gxb);
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
