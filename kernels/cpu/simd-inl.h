// Per-target helpers of the vector kernels: SLEEF's vector exp / log / tanh / erf for the current Highway target,
// loops over a contiguous range whose tail runs through the same vector code, and lane sums in double. See
// kernels/cpu/simd.h for the pattern. foreach_target includes this once per target, hence the toggle guard in
// place of #pragma once.
#if defined(SHARDRT_KERNELS_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHARDRT_KERNELS_CPU_SIMD_INL_H_
#undef SHARDRT_KERNELS_CPU_SIMD_INL_H_
#else
#define SHARDRT_KERNELS_CPU_SIMD_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace shardrt::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- vector math ----
// SLEEF's 1.0-ulp functions for the target's full vectors. sleef.h declares its x86 variants only when the whole
// file is compiled with -mavx2 / -mavx512f, which the library is not (that is the point), so the few used here are
// declared inside the target's attribute region, where the vector types pass in the target's registers.
// Targets SLEEF has no variant for (SSSE3, emulated 128-bit) fall back to the C library lane by lane.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define SHARDRT_VECTOR_MATH(Fn, name)                                                                        \
  extern "C" __m512 Sleef_##name##f16_u10avx512f(__m512);                                                  \
  extern "C" __m512d Sleef_##name##d8_u10avx512f(__m512d);                                                 \
  HWY_INLINE hn::Vec512<float> Fn(hn::Vec512<float> v) {                                                   \
    return hn::Vec512<float>{Sleef_##name##f16_u10avx512f(v.raw)};                                         \
  }                                                                                                        \
  HWY_INLINE hn::Vec512<double> Fn(hn::Vec512<double> v) {                                                 \
    return hn::Vec512<double>{Sleef_##name##d8_u10avx512f(v.raw)};                                         \
  }
#elif HWY_TARGET == HWY_AVX2
#define SHARDRT_VECTOR_MATH(Fn, name)                                                                        \
  extern "C" __m256 Sleef_##name##f8_u10avx2(__m256);                                                      \
  extern "C" __m256d Sleef_##name##d4_u10avx2(__m256d);                                                    \
  HWY_INLINE hn::Vec256<float> Fn(hn::Vec256<float> v) { return hn::Vec256<float>{Sleef_##name##f8_u10avx2(v.raw)}; } \
  HWY_INLINE hn::Vec256<double> Fn(hn::Vec256<double> v) {                                                 \
    return hn::Vec256<double>{Sleef_##name##d4_u10avx2(v.raw)};                                            \
  }
#elif HWY_TARGET == HWY_SSE4
#define SHARDRT_VECTOR_MATH(Fn, name)                                                                        \
  extern "C" __m128 Sleef_##name##f4_u10sse4(__m128);                                                      \
  extern "C" __m128d Sleef_##name##d2_u10sse4(__m128d);                                                    \
  HWY_INLINE hn::Vec128<float> Fn(hn::Vec128<float> v) { return hn::Vec128<float>{Sleef_##name##f4_u10sse4(v.raw)}; } \
  HWY_INLINE hn::Vec128<double> Fn(hn::Vec128<double> v) {                                                 \
    return hn::Vec128<double>{Sleef_##name##d2_u10sse4(v.raw)};                                            \
  }
#else
#define SHARDRT_VECTOR_MATH(Fn, name)                                                                        \
  template <class V>                                                                                       \
  HWY_INLINE V Fn(V v) {                                                                                   \
    const hn::DFromV<V> d;                                                                                 \
    alignas(HWY_MAX_BYTES) hn::TFromV<V> lanes[HWY_MAX_BYTES / sizeof(hn::TFromV<V>)];                    \
    hn::Store(v, d, lanes);                                                                                \
    for (size_t i = 0; i < hn::Lanes(d); ++i) lanes[i] = std::name(lanes[i]);                              \
    return hn::Load(d, lanes);                                                                             \
  }
#endif

SHARDRT_VECTOR_MATH(VExp, exp)
SHARDRT_VECTOR_MATH(VLog, log)
SHARDRT_VECTOR_MATH(VTanh, tanh)
SHARDRT_VECTOR_MATH(VErf, erf)
#undef SHARDRT_VECTOR_MATH

// erf of float vectors in plain vector arithmetic, some 3x cheaper than SLEEF's double-float erff (which made GELU
// compute-bound) at a worst error of about 2.3 ulp (tests/kernels/test_cpu_simd.cpp measures it). Two ranges,
// both evaluated and blended, odd symmetry by the sign of x:
//   |x| <= 1:      erf(x) = x P(x^2), P of degree 6;
//   1 < |x| <= 4:  erf(x) = 1 - exp(Q(u) - x^2), u = (|x| - 2.5) / 1.5 on [-1, 1], Q of degree 9 (log erfc(x) + x^2
//                  is smooth there); past 4, erf rounds to 1 in float and |x| is clamped.
// The coefficients are least-squares fits on Chebyshev nodes against mpmath's erf (P with weight 1 / erf(x) / x),
// rounded to float. double keeps SLEEF's 1-ulp erf.
template <class D>
HWY_INLINE hn::Vec<D> ErfOf(D d, hn::Vec<D> x) {
  using V = hn::Vec<D>;
  if constexpr (std::is_same_v<hn::TFromD<D>, float>) {
    const V one = hn::Set(d, 1.0f);
    const V ax = hn::Abs(x);
    const V t = hn::Mul(ax, ax);
    V p = hn::Set(d, 7.84725926e-05f);
    for (float c : {-0.000800818903f, 0.00518809911f, -0.0268536918f, 0.112835824f, -0.37612626f, 1.12837911f}) {
      p = hn::MulAdd(p, t, hn::Set(d, c));
    }
    const V near = hn::Mul(ax, p);
    const V a = hn::Min(ax, hn::Set(d, 4.0f));
    const V u = hn::Mul(hn::Sub(a, hn::Set(d, 2.5f)), hn::Set(d, 1.0f / 1.5f));
    V q = hn::Set(d, -2.53067174e-06f);
    for (float c : {4.13666348e-05f, -0.000221709401f, 0.000881570857f, -0.0031947433f, 0.0109611237f,
                    -0.0366463102f, 0.126239315f, -0.529021084f, -1.55681527f}) {
      q = hn::MulAdd(q, u, hn::Set(d, c));
    }
    const V far = hn::Sub(one, VExp(hn::NegMulAdd(a, a, q)));
    const V r = hn::CopySign(hn::IfThenElse(hn::Le(ax, one), near, far), x);
    return hn::IfThenElse(hn::IsNaN(x), x, r);  // the clamp would have turned NaN into 1
  } else {
    (void)d;
    return VErf(x);
  }
}

// exp(y + y_lo) of float vectors with y <= 0 and |y_lo| tiny (a rounding error the caller recovered), for the
// GELU below: SLEEF's expf handles the whole range and every special, and costs about twice this. 2^n exp(r)
// with n = round(y / ln 2) and r = y - n ln 2 (ln 2 in two parts, so r is exact), exp(r) on [-ln2/2, ln2/2] by a
// degree-6 polynomial (relative error 2e-9, a minimax fit rounded to float), 2^n built in the exponent bits.
// Below -87, where 2^n would leave the normal range, the result is 0 (the true value is under 2e-38).
template <class D>
HWY_INLINE hn::Vec<D> ExpNonPositiveF32(D d, hn::Vec<D> y, hn::Vec<D> y_lo) {
  using V = hn::Vec<D>;
  const hn::RebindToSigned<D> di;
  const V floor = hn::Set(d, -87.0f);
  const V yc = hn::Max(y, floor);
  const V n = hn::Round(hn::Mul(yc, hn::Set(d, 1.44269504f)));
  V r = hn::MulAdd(n, hn::Set(d, -0.693145751953125f), yc);
  r = hn::Add(hn::MulAdd(n, hn::Set(d, -1.42860677e-06f), r), y_lo);
  V p = hn::Set(d, 0.00138368364f);
  for (float c : {0.00837481581f, 0.0416682251f, 0.166664198f, 0.49999991f, 1.0f, 1.0f}) {
    p = hn::MulAdd(p, r, hn::Set(d, c));
  }
  const auto scale = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::IfThenZeroElse(hn::Lt(y, floor), hn::Mul(p, hn::BitCast(d, scale)));
}

// The upper tail of the standard normal, Q(a) = P(X > a) = erfc(a / sqrt 2) / 2, for a = |x| >= 0 in float, and
// the Gaussian factor g = exp(-a^2 / 2) it is built on (GELU's backward needs it for the density). The form is
// Q(a) = g t P(t), t = 1 / (1 + 0.21 a), P of degree 8 (erfc times exp(z^2) is smooth and slowly varying for
// z >= 0, so a polynomial in t covers all of a in [0, 14] to a relative 1.6e-8 as fitted; beyond 13.2 Q is 0 in
// float anyway). One exp and no range switch, against erf's two ranges and SLEEF exp; and Q keeps its *relative*
// accuracy far into the tail, where 1 + erf(x) for negative x cancels. a^2 is split into its rounded value and the
// rounding error (an exact FMA), which goes into the exp's argument: at a = 13 that error alone would be 30 ulp.
// t takes the approximate reciprocal and one Newton step (rcp14 on AVX-512, rcp on AVX2: 23+ bits after it).
template <class D>
HWY_INLINE hn::Vec<D> NormalUpperTailF32(D d, hn::Vec<D> a, hn::Vec<D>& gauss) {
  using V = hn::Vec<D>;
  const V sq = hn::Mul(a, a);
  const V sq_err = hn::MulSub(a, a, sq);
  const V minus_half = hn::Set(d, -0.5f);
  gauss = ExpNonPositiveF32(d, hn::Mul(sq, minus_half), hn::Mul(sq_err, minus_half));
  // min keeps t finite (not 0 * inf) at a = inf, where gauss is already 0.
  const V s = hn::MulAdd(hn::Min(a, hn::Set(d, 14.0f)), hn::Set(d, 0.21f), hn::Set(d, 1.0f));
  const V t0 = hn::ApproximateReciprocal(s);
  // At s = 1 (|x| below 3e-8) t must be exactly 1, so that Q(0) is P(1) = 0.5 as on AVX-512, where rcp14(1) is
  // exact: AVX2's 12-bit rcp and one Newton step leave 1 - 2^-24, and GELU'(0) came out one ulp below 0.5.
  const V one = hn::Set(d, 1.0f);
  const V t = hn::IfThenElse(hn::Eq(s, one), one, hn::Mul(t0, hn::NegMulAdd(s, t0, hn::Set(d, 2.0f))));
  V p = hn::Set(d, -0.0716563389f);
  for (float c : {0.283588827f, -0.330254078f, 0.349401981f, -0.0939259678f, 0.124873087f, 0.0691920668f,
                  0.0850688741f, 0.083711572f}) {
    p = hn::MulAdd(p, t, hn::Set(d, c));
  }
  return hn::Mul(hn::Mul(gauss, t), p);
}

// ---- loops over n contiguous elements; out may alias an input ----
// The tail (n not a multiple of the lane count) is copied into a zero-padded vector and computed like the rest,
// so an element's result does not depend on where it sits in the range.

template <class D>
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(hn::TFromD<D>);

// out[i] = f(x[i]).
template <class D, class F>
HWY_INLINE void Map1(D d, int64_t n, const hn::TFromD<D>* x, hn::TFromD<D>* out, F f) {
  using T = hn::TFromD<D>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(hn::LoadU(d, x + i)), d, out + i);
  if (i == n) return;
  const size_t rest = static_cast<size_t>(n - i);
  alignas(HWY_MAX_BYTES) T bx[kMaxLanes<D>] = {};
  std::memcpy(bx, x + i, rest * sizeof(T));
  hn::Store(f(hn::Load(d, bx)), d, bx);
  std::memcpy(out + i, bx, rest * sizeof(T));
}

// out[i] = f(a[i], b[i]).
template <class D, class F>
HWY_INLINE void Map2(D d, int64_t n, const hn::TFromD<D>* a, const hn::TFromD<D>* b, hn::TFromD<D>* out, F f) {
  using T = hn::TFromD<D>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, out + i);
  if (i == n) return;
  const size_t rest = static_cast<size_t>(n - i);
  alignas(HWY_MAX_BYTES) T ba[kMaxLanes<D>] = {};
  alignas(HWY_MAX_BYTES) T bb[kMaxLanes<D>] = {};
  std::memcpy(ba, a + i, rest * sizeof(T));
  std::memcpy(bb, b + i, rest * sizeof(T));
  hn::Store(f(hn::Load(d, ba), hn::Load(d, bb)), d, ba);
  std::memcpy(out + i, ba, rest * sizeof(T));
}

// out[i] = f(a[i], b[i], c[i]).
template <class D, class F>
HWY_INLINE void Map3(D d, int64_t n, const hn::TFromD<D>* a, const hn::TFromD<D>* b, const hn::TFromD<D>* c,
                     hn::TFromD<D>* out, F f) {
  using T = hn::TFromD<D>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(f(hn::LoadU(d, a + i), hn::LoadU(d, b + i), hn::LoadU(d, c + i)), d, out + i);
  }
  if (i == n) return;
  const size_t rest = static_cast<size_t>(n - i);
  alignas(HWY_MAX_BYTES) T ba[kMaxLanes<D>] = {};
  alignas(HWY_MAX_BYTES) T bb[kMaxLanes<D>] = {};
  alignas(HWY_MAX_BYTES) T bc[kMaxLanes<D>] = {};
  std::memcpy(ba, a + i, rest * sizeof(T));
  std::memcpy(bb, b + i, rest * sizeof(T));
  std::memcpy(bc, c + i, rest * sizeof(T));
  hn::Store(f(hn::Load(d, ba), hn::Load(d, bb), hn::Load(d, bc)), d, ba);
  std::memcpy(out + i, ba, rest * sizeof(T));
}

// Loads lanes [i, n) of x with zeros beyond n (n - i < Lanes(d)): the tail of a reduction, where a zero adds
// nothing.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const hn::TFromD<D>* x, int64_t i, int64_t n) {
  alignas(HWY_MAX_BYTES) hn::TFromD<D> buf[kMaxLanes<D>] = {};
  std::memcpy(buf, x + i, static_cast<size_t>(n - i) * sizeof(hn::TFromD<D>));
  return hn::Load(d, buf);
}

// The sum of v's lanes in double, in lane order (the same bits on every call).
template <class D>
HWY_INLINE double SumLanes(D d, hn::Vec<D> v) {
  alignas(HWY_MAX_BYTES) hn::TFromD<D> lanes[kMaxLanes<D>];
  hn::Store(v, d, lanes);
  double s = 0.0;
  for (size_t i = 0; i < hn::Lanes(d); ++i) s += static_cast<double>(lanes[i]);
  return s;
}

}  // namespace shardrt::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SHARDRT_KERNELS_CPU_SIMD_INL_H_ toggle
