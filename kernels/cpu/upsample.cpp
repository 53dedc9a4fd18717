#include "kernels/cpu/upsample.h"

#include <algorithm>
#include <vector>

namespace shardrt::kernels::cpu {
namespace {

// Below this many elements touched an OpenMP region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;

// Interpolation along one axis (the resampling is separable): output index o reads input index[t][o] with
// weight weight[t][o], for t < taps (1 for nearest, 2 for linear).
template <typename T>
struct AxisTaps {
  int taps = 1;
  std::vector<int64_t> index[2];
  std::vector<T> weight[2];
};

template <typename T>
AxisTaps<T> axis_taps(UpsampleMode mode, bool align_corners, int64_t in, int64_t out) {
  AxisTaps<T> axis;
  axis.taps = mode == UpsampleMode::nearest ? 1 : 2;
  for (int t = 0; t < axis.taps; ++t) {
    axis.index[t].resize(out);
    axis.weight[t].resize(out);
  }
  if (mode == UpsampleMode::nearest) {
    for (int64_t o = 0; o < out; ++o) {
      axis.index[0][o] = o * in / out;
      axis.weight[0][o] = T(1);
    }
    return axis;
  }
  const double scale =
      align_corners ? (out > 1 ? double(in - 1) / double(out - 1) : 0.0) : double(in) / double(out);
  for (int64_t o = 0; o < out; ++o) {
    const double src = align_corners ? scale * double(o) : std::max(scale * (double(o) + 0.5) - 0.5, 0.0);
    const int64_t lo = std::min(int64_t(src), in - 1);
    const double frac = std::clamp(src - double(lo), 0.0, 1.0);
    axis.index[0][o] = lo;
    axis.index[1][o] = lo < in - 1 ? lo + 1 : lo;
    axis.weight[0][o] = T(1.0 - frac);
    axis.weight[1][o] = T(frac);
  }
  return axis;
}

// The three axes of a volume; an nd < 3 input gets leading size-1 axes, resampled by the identity.
template <typename T>
struct VolumeTaps {
  int64_t in[3], out[3];
  AxisTaps<T> axis[3];
};

template <typename T>
VolumeTaps<T> volume_taps(UpsampleMode mode, bool align_corners, int nd, const int64_t* in, const int64_t* out) {
  VolumeTaps<T> v;
  for (int d = 0; d < 3; ++d) {
    const int src_dim = d - (3 - nd);
    const bool used = src_dim >= 0;
    v.in[d] = used ? in[src_dim] : 1;
    v.out[d] = used ? out[src_dim] : 1;
    v.axis[d] = axis_taps<T>(used ? mode : UpsampleMode::nearest, align_corners, v.in[d], v.out[d]);
  }
  return v;
}

// Calls visit(p, src, w) for every output position p of one plane and every input position src it reads, with
// the product weight w of the per-axis taps.
template <typename T, typename Visit>
void for_each_tap(const VolumeTaps<T>& v, Visit&& visit) {
  const AxisTaps<T>& a0 = v.axis[0];
  const AxisTaps<T>& a1 = v.axis[1];
  const AxisTaps<T>& a2 = v.axis[2];
  int64_t p = 0;
  for (int64_t o0 = 0; o0 < v.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < v.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < v.out[2]; ++o2, ++p)
        for (int t0 = 0; t0 < a0.taps; ++t0)
          for (int t1 = 0; t1 < a1.taps; ++t1) {
            const T w01 = a0.weight[t0][o0] * a1.weight[t1][o1];
            const int64_t row = (a0.index[t0][o0] * v.in[1] + a1.index[t1][o1]) * v.in[2];
            for (int t2 = 0; t2 < a2.taps; ++t2) visit(p, row + a2.index[t2][o2], w01 * a2.weight[t2][o2]);
          }
}

}  // namespace

template <typename T>
void upsample_forward(UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                      const int64_t* out, const T* x, T* y) {
  const VolumeTaps<T> v = volume_taps<T>(mode, align_corners, nd, in, out);
  const int64_t in_vol = v.in[0] * v.in[1] * v.in[2], out_vol = v.out[0] * v.out[1] * v.out[2];
#pragma omp parallel for if (planes * out_vol > kParallelWork) schedule(static)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xp = x + plane * in_vol;
    T* yp = y + plane * out_vol;
    std::fill(yp, yp + out_vol, T(0));
    for_each_tap(v, [&](int64_t p, int64_t src, T w) { yp[p] += w * xp[src]; });
  }
}

template <typename T>
void upsample_backward(UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                       const int64_t* out, const T* gy, T* gx) {
  const VolumeTaps<T> v = volume_taps<T>(mode, align_corners, nd, in, out);
  const int64_t in_vol = v.in[0] * v.in[1] * v.in[2], out_vol = v.out[0] * v.out[1] * v.out[2];
#pragma omp parallel for if (planes * out_vol > kParallelWork) schedule(static)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* gyp = gy + plane * out_vol;
    T* gxp = gx + plane * in_vol;
    std::fill(gxp, gxp + in_vol, T(0));
    for_each_tap(v, [&](int64_t p, int64_t src, T w) { gxp[src] += w * gyp[p]; });
  }
}

#define SHARDRT_INSTANTIATE(T)                                                                                 \
  template void upsample_forward<T>(UpsampleMode, bool, int, int64_t, const int64_t*, const int64_t*, const T*, \
                                    T*);                                                                        \
  template void upsample_backward<T>(UpsampleMode, bool, int, int64_t, const int64_t*, const int64_t*,          \
                                     const T*, T*);
SHARDRT_INSTANTIATE(float)
SHARDRT_INSTANTIATE(double)
#undef SHARDRT_INSTANTIATE

}  // namespace shardrt::kernels::cpu
