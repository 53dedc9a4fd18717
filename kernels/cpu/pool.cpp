#include "kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/pool_window.h"

namespace shardrt::kernels::cpu {
namespace {

// Below this many elements touched an OpenMP region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;

using pool_window::volume;

// Calls visit(p, src) for every output position p of one plane (row-major over g.out) and every kernel tap of
// its window that lies inside the input (kernels/pool_window.h), src being that tap's flat position within the
// input plane; calls for one p are consecutive and in tap order.
template <typename Visit>
void for_each_window_tap(const ConvGeometry& g, Visit&& visit) {
  int64_t p = 0;
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < g.out[2]; ++o2, ++p)
        pool_window::for_each_tap(g, o0, o1, o2, [&](int64_t src) { visit(p, src); });
}

}  // namespace

template <typename T>
void avg_pool_forward(const ConvGeometry& g, const T* x, T* y) {
  const int64_t planes = g.batch * g.c_in, in_vol = volume(g.in), out_vol = volume(g.out);
  const T inv_count = T(1) / T(volume(g.kernel));
#pragma omp parallel for if (planes * out_vol * volume(g.kernel) > kParallelWork) schedule(static)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xp = x + plane * in_vol;
    T* yp = y + plane * out_vol;
    std::fill(yp, yp + out_vol, T(0));
    for_each_window_tap(g, [&](int64_t p, int64_t src) { yp[p] += xp[src]; });
    for (int64_t p = 0; p < out_vol; ++p) yp[p] *= inv_count;
  }
}

template <typename T>
void avg_pool_backward(const ConvGeometry& g, const T* gy, T* gx) {
  const int64_t planes = g.batch * g.c_in, in_vol = volume(g.in), out_vol = volume(g.out);
  const T inv_count = T(1) / T(volume(g.kernel));
#pragma omp parallel for if (planes * out_vol * volume(g.kernel) > kParallelWork) schedule(static)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* gyp = gy + plane * out_vol;
    T* gxp = gx + plane * in_vol;
    std::fill(gxp, gxp + in_vol, T(0));
    for_each_window_tap(g, [&](int64_t p, int64_t src) { gxp[src] += gyp[p] * inv_count; });
  }
}

template <typename T>
void max_pool_forward(const ConvGeometry& g, const T* x, T* y, int64_t* argmax) {
  const int64_t planes = g.batch * g.c_in, in_vol = volume(g.in), out_vol = volume(g.out);
#pragma omp parallel for if (planes * out_vol * volume(g.kernel) > kParallelWork) schedule(static)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* xp = x + plane * in_vol;
    T* yp = y + plane * out_vol;
    int64_t* ap = argmax + plane * out_vol;
    // A window lying wholly in the padding (impossible when pad <= kernel / 2, as PyTorch requires) keeps -inf
    // and argmax -1, which the backward skips.
    std::fill(yp, yp + out_vol, -std::numeric_limits<T>::infinity());
    std::fill(ap, ap + out_vol, int64_t(-1));
    for_each_window_tap(g, [&](int64_t p, int64_t src) {
      const T v = xp[src];
      if (ap[p] < 0 || v > yp[p] || std::isnan(v)) {
        yp[p] = v;
        ap[p] = src;
      }
    });
  }
}

template <typename T>
void max_pool_backward(const ConvGeometry& g, const T* gy, const int64_t* argmax, T* gx) {
  const int64_t planes = g.batch * g.c_in, in_vol = volume(g.in), out_vol = volume(g.out);
#pragma omp parallel for if (planes * (in_vol + out_vol) > kParallelWork) schedule(static)
  for (int64_t plane = 0; plane < planes; ++plane) {
    const T* gyp = gy + plane * out_vol;
    const int64_t* ap = argmax + plane * out_vol;
    T* gxp = gx + plane * in_vol;
    std::fill(gxp, gxp + in_vol, T(0));
    for (int64_t p = 0; p < out_vol; ++p)
      if (ap[p] >= 0) gxp[ap[p]] += gyp[p];
  }
}

#define SHARDRT_INSTANTIATE(T)                                                          \
  template void avg_pool_forward<T>(const ConvGeometry&, const T*, T*);                 \
  template void avg_pool_backward<T>(const ConvGeometry&, const T*, T*);                \
  template void max_pool_forward<T>(const ConvGeometry&, const T*, T*, int64_t*);       \
  template void max_pool_backward<T>(const ConvGeometry&, const T*, const int64_t*, T*);
SHARDRT_INSTANTIATE(float)
SHARDRT_INSTANTIATE(double)
#undef SHARDRT_INSTANTIATE

}  // namespace shardrt::kernels::cpu
