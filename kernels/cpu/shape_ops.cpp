#include "kernels/cpu/shape_ops.h"

#include <algorithm>
#include <vector>

namespace shardrt::kernels::cpu {
namespace {

// Below this many elements touched an OpenMP region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;

// Index into [0, n) that output coordinate s = o - pad_lo reads, or -1 for the constant fill.
int64_t pad_source(PadMode mode, int64_t s, int64_t n) {
  switch (mode) {
    case PadMode::constant:
      return s >= 0 && s < n ? s : -1;
    case PadMode::replicate:
      return std::clamp<int64_t>(s, 0, n - 1);
    case PadMode::circular:
      return (s % n + n) % n;
    case PadMode::reflect: {
      if (n == 1) return 0;
      // Mirroring without repeating the edges is periodic with period 2(n - 1).
      const int64_t period = 2 * (n - 1);
      const int64_t m = (s % period + period) % period;
      return m < n ? m : period - m;
    }
  }
  return -1;
}

// The padding seen as a 3-d volume (leading size-1 dims for nd < 3): source[d][o] is the input index that output
// index o of dim d reads, -1 for the constant fill.
struct PadPlan {
  int64_t in[3], out[3];
  std::vector<int64_t> source[3];
};

PadPlan pad_plan(PadMode mode, int nd, const int64_t* in, const int64_t* pad_lo, const int64_t* pad_hi) {
  PadPlan plan;
  for (int d = 0; d < 3; ++d) {
    const int src_dim = d - (3 - nd);
    const int64_t lo = src_dim >= 0 ? pad_lo[src_dim] : 0;
    plan.in[d] = src_dim >= 0 ? in[src_dim] : 1;
    plan.out[d] = plan.in[d] + lo + (src_dim >= 0 ? pad_hi[src_dim] : 0);
    plan.source[d].resize(plan.out[d]);
    for (int64_t o = 0; o < plan.out[d]; ++o) plan.source[d][o] = pad_source(mode, o - lo, plan.in[d]);
  }
  return plan;
}

}  // namespace

template <typename T>
void copy_block(int64_t rows, int64_t cols, const T* src, int64_t src_stride, T* dst, int64_t dst_stride) {
#pragma omp parallel for if (rows > 1 && rows * cols > kParallelWork) schedule(static)
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * src_stride, cols, dst + r * dst_stride);
}

template <typename T>
void cat(int64_t outer, int64_t inner, int64_t n_parts, const T* const* parts, const int64_t* part_n, T* out) {
  int64_t total = 0;
  for (int64_t p = 0; p < n_parts; ++p) total += part_n[p];
  int64_t offset = 0;
  for (int64_t p = 0; p < n_parts; ++p) {
    copy_block(outer, part_n[p] * inner, parts[p], part_n[p] * inner, out + offset * inner, total * inner);
    offset += part_n[p];
  }
}

template <typename T>
void split(int64_t outer, int64_t inner, int64_t n_parts, const T* in, const int64_t* part_n, T* const* parts) {
  int64_t total = 0;
  for (int64_t p = 0; p < n_parts; ++p) total += part_n[p];
  int64_t offset = 0;
  for (int64_t p = 0; p < n_parts; ++p) {
    copy_block(outer, part_n[p] * inner, in + offset * inner, total * inner, parts[p], part_n[p] * inner);
    offset += part_n[p];
  }
}

template <typename T>
void pad(PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* pad_lo, const int64_t* pad_hi,
         T value, const T* x, T* y) {
  const PadPlan plan = pad_plan(mode, nd, in, pad_lo, pad_hi);
  const int64_t in_vol = plan.in[0] * plan.in[1] * plan.in[2];
  const int64_t out_rows = plan.out[0] * plan.out[1];
  const int64_t row_len = plan.out[2];
  const int64_t* source2 = plan.source[2].data();
#pragma omp parallel for if (outer * out_rows * row_len > kParallelWork) schedule(static)
  for (int64_t task = 0; task < outer * out_rows; ++task) {
    const int64_t o = task / out_rows, row = task % out_rows;
    const int64_t s0 = plan.source[0][row / plan.out[1]], s1 = plan.source[1][row % plan.out[1]];
    T* yr = y + task * row_len;
    if (s0 < 0 || s1 < 0) {
      std::fill(yr, yr + row_len, value);
      continue;
    }
    const T* xr = x + o * in_vol + (s0 * plan.in[1] + s1) * plan.in[2];
    for (int64_t c = 0; c < row_len; ++c) yr[c] = source2[c] >= 0 ? xr[source2[c]] : value;
  }
}

template <typename T>
void pad_backward(PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* pad_lo,
                  const int64_t* pad_hi, const T* gy, T* gx) {
  const PadPlan plan = pad_plan(mode, nd, in, pad_lo, pad_hi);
  const int64_t in_vol = plan.in[0] * plan.in[1] * plan.in[2];
  const int64_t out_vol = plan.out[0] * plan.out[1] * plan.out[2];
  const int64_t* source2 = plan.source[2].data();
#pragma omp parallel for if (outer * (in_vol + out_vol) > kParallelWork) schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    T* gxo = gx + o * in_vol;
    std::fill(gxo, gxo + in_vol, T(0));
    const T* gyr = gy + o * out_vol;
    for (int64_t a = 0; a < plan.out[0]; ++a)
      for (int64_t b = 0; b < plan.out[1]; ++b, gyr += plan.out[2]) {
        const int64_t s0 = plan.source[0][a], s1 = plan.source[1][b];
        if (s0 < 0 || s1 < 0) continue;
        T* gxr = gxo + (s0 * plan.in[1] + s1) * plan.in[2];
        for (int64_t c = 0; c < plan.out[2]; ++c)
          if (source2[c] >= 0) gxr[source2[c]] += gyr[c];
      }
  }
}

#define SHARDRT_INSTANTIATE(T)                                                                                   \
  template void copy_block<T>(int64_t, int64_t, const T*, int64_t, T*, int64_t);                                 \
  template void cat<T>(int64_t, int64_t, int64_t, const T* const*, const int64_t*, T*);                          \
  template void split<T>(int64_t, int64_t, int64_t, const T*, const int64_t*, T* const*);                        \
  template void pad<T>(PadMode, int, int64_t, const int64_t*, const int64_t*, const int64_t*, T, const T*, T*); \
  template void pad_backward<T>(PadMode, int, int64_t, const int64_t*, const int64_t*, const int64_t*, const T*, \
                                T*);
SHARDRT_INSTANTIATE(float)
SHARDRT_INSTANTIATE(double)
#undef SHARDRT_INSTANTIATE

}  // namespace shardrt::kernels::cpu
