// AdamW and SGD in SIMD lanes (see optim/update_simd.h; the dispatch pattern is kernels/cpu/simd.h's). Why vectors:
// the library is built for the x86-64 baseline, where the compiler's own vectorisation of the update stops at SSE2,
// and the update is a long stream of multiplies, a square root and a division per element.
// No fused multiply-add: GCC contracts a * b + c into an FMA wherever the target has one (AVX2 and up), even in
// intrinsics, which would round differently from the scalar formula and from the SSE targets. Off for this file,
// so every target gives the scalar formula's bits.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optim/update_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cmath>
#include <hwy/highway.h>

#include "optim/update_simd.h"

HWY_BEFORE_NAMESPACE();
namespace shardrt::optim::simd::HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

// One element of AdamW, the scalar formula (the vector loop's tail runs it, so a tail element is computed alike).
template <class T>
HWY_INLINE void AdamWOne(T& p, T g, T& m, T& v, const AdamWConstants<T>& c) {
  p = p * c.decay;
  m = c.b1 * m + c.one_minus_b1 * g;
  v = c.b2 * v + c.one_minus_b2 * g * g;
  p = p - c.step_size * m / (std::sqrt(v) / c.sqrt_bc2 + c.eps);
}

template <class T>
HWY_INLINE void AdamWLanes(T* HWY_RESTRICT p, const T* HWY_RESTRICT g, T* HWY_RESTRICT m, T* HWY_RESTRICT v,
                           int64_t n, const AdamWConstants<T>& c) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto decay = hn::Set(d, c.decay), b1 = hn::Set(d, c.b1), nb1 = hn::Set(d, c.one_minus_b1);
  const auto b2 = hn::Set(d, c.b2), nb2 = hn::Set(d, c.one_minus_b2), step = hn::Set(d, c.step_size);
  const auto bc2 = hn::Set(d, c.sqrt_bc2), eps = hn::Set(d, c.eps);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto gi = hn::LoadU(d, g + i);
    const auto pi = hn::Mul(hn::LoadU(d, p + i), decay);
    const auto mi = hn::Add(hn::Mul(b1, hn::LoadU(d, m + i)), hn::Mul(nb1, gi));
    const auto vi = hn::Add(hn::Mul(b2, hn::LoadU(d, v + i)), hn::Mul(hn::Mul(nb2, gi), gi));
    const auto denom = hn::Add(hn::Div(hn::Sqrt(vi), bc2), eps);
    hn::StoreU(hn::Sub(pi, hn::Div(hn::Mul(step, mi), denom)), d, p + i);
    hn::StoreU(mi, d, m + i);
    hn::StoreU(vi, d, v + i);
  }
  for (; i < n; ++i) AdamWOne(p[i], g[i], m[i], v[i], c);
}

template <class T>
HWY_INLINE void SGDLanes(T* HWY_RESTRICT p, const T* HWY_RESTRICT g, T* HWY_RESTRICT buf, int64_t n,
                         const SGDConstants<T>& c) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto wd = hn::Set(d, c.wd), mu = hn::Set(d, c.mu), keep = hn::Set(d, c.keep), rate = hn::Set(d, c.rate);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto di = hn::Add(hn::LoadU(d, g + i), hn::Mul(wd, hn::LoadU(d, p + i)));
    if (c.momentum) {
      const auto bi = c.first ? di : hn::Add(hn::Mul(mu, hn::LoadU(d, buf + i)), hn::Mul(keep, di));
      hn::StoreU(bi, d, buf + i);
      di = c.nesterov ? hn::Add(di, hn::Mul(mu, bi)) : bi;
    }
    hn::StoreU(hn::Sub(hn::LoadU(d, p + i), hn::Mul(rate, di)), d, p + i);
  }
  for (; i < n; ++i) {
    T di = g[i] + c.wd * p[i];
    if (c.momentum) {
      buf[i] = c.first ? di : c.mu * buf[i] + c.keep * di;
      di = c.nesterov ? di + c.mu * buf[i] : buf[i];
    }
    p[i] = p[i] - c.rate * di;
  }
}

}  // namespace

void AdamWF32(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConstants<float>& c) {
  AdamWLanes(p, g, m, v, n, c);
}
void AdamWF64(double* p, const double* g, double* m, double* v, int64_t n, const AdamWConstants<double>& c) {
  AdamWLanes(p, g, m, v, n, c);
}
void SGDF32(float* p, const float* g, float* buf, int64_t n, const SGDConstants<float>& c) { SGDLanes(p, g, buf, n, c); }
void SGDF64(double* p, const double* g, double* buf, int64_t n, const SGDConstants<double>& c) {
  SGDLanes(p, g, buf, n, c);
}

}  // namespace shardrt::optim::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrt::optim::simd {
HWY_EXPORT(AdamWF32);
HWY_EXPORT(AdamWF64);
HWY_EXPORT(SGDF32);
HWY_EXPORT(SGDF64);

void adamw_chunk(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConstants<float>& c) {
  HWY_DYNAMIC_DISPATCH(AdamWF32)(p, g, m, v, n, c);
}
void adamw_chunk(double* p, const double* g, double* m, double* v, int64_t n, const AdamWConstants<double>& c) {
  HWY_DYNAMIC_DISPATCH(AdamWF64)(p, g, m, v, n, c);
}
void sgd_chunk(float* p, const float* g, float* buf, int64_t n, const SGDConstants<float>& c) {
  HWY_DYNAMIC_DISPATCH(SGDF32)(p, g, buf, n, c);
}
void sgd_chunk(double* p, const double* g, double* buf, int64_t n, const SGDConstants<double>& c) {
  HWY_DYNAMIC_DISPATCH(SGDF64)(p, g, buf, n, c);
}
}  // namespace shardrt::optim::simd
#endif  // HWY_ONCE
