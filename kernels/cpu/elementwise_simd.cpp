// Vector bodies of the elementwise kernels, compiled once per SIMD target (kernels/cpu/simd.h has the pattern).
// Each formula is the scalar one of kernels/cpu/elementwise.cpp written on whole vectors, with the same NaN, kink
// and saturation rules; only the rounding of exp / erf / tanh differs (SLEEF's, within 1 ulp; float erf within
// about 2.3 ulp, see ErfOf in kernels/cpu/simd-inl.h; float exact GELU through the normal tail of simd-inl.h,
// within a few ulp, see GeluErf).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>
#include <numbers>
#include <type_traits>

#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/simd-inl.h"
#include "kernels/cpu/simd.h"

HWY_BEFORE_NAMESPACE();
namespace shardrt::kernels::cpu::HWY_NAMESPACE {
namespace {

// sigmoid from exp of a non-positive argument only, so large |x| neither overflows nor loses the small tail:
// 1 / (1 + e) for x >= 0 and e / (1 + e) below, e = exp(-|x|).
template <class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  const V one = hn::Set(d, 1);
  const V e = VExp(hn::Neg(hn::Abs(x)));
  return hn::Div(hn::IfThenElse(hn::Ge(x, hn::Zero(d)), one, e), hn::Add(one, e));
}

// tanh(sqrt(2/pi) (x + 0.044715 x^3)), the inner term of the tanh GELU.
template <class D, class V>
HWY_INLINE V GeluTanhInner(D d, V x) {
  using T = hn::TFromD<D>;
  const V cubic = hn::Mul(hn::Mul(hn::Mul(hn::Set(d, T(0.044715)), x), x), x);
  return VTanh(hn::Mul(hn::Set(d, std::numbers::sqrt2_v<T> * std::numbers::inv_sqrtpi_v<T>), hn::Add(x, cubic)));
}

// 0.5 (1 + erf(x / sqrt 2)), the normal CDF, in double (SLEEF's 1-ulp erf).
template <class D, class V>
HWY_INLINE V NormalCdf(D d, V x) {
  using T = hn::TFromD<D>;
  const V half = hn::Set(d, T(0.5));
  const V scaled = hn::Mul(hn::Mul(x, hn::Set(d, std::numbers::sqrt2_v<T>)), half);  // x / sqrt 2
  return hn::Mul(half, hn::Add(hn::Set(d, T(1)), ErfOf(d, scaled)));
}

// The normal CDF of float x from its upper tail Q(|x|) (simd-inl.h): Q(|x|) below 0, 1 - Q(|x|) above, so the
// negative side, where GELU is x times a small CDF, keeps its relative accuracy. `gauss` gets exp(-x^2 / 2).
template <class D, class V>
HWY_INLINE V NormalCdfF32(D d, V x, V& gauss) {
  const V tail = NormalUpperTailF32(d, hn::Abs(x), gauss);
  return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), tail, hn::Sub(hn::Set(d, 1.0f), tail));
}

// Exact GELU x * cdf(x) and its derivative cdf(x) + x pdf(x), pdf = exp(-x^2 / 2) / sqrt(2 pi): float through
// NormalCdfF32 (one exp for both), double through erf and exp.
template <class D, class V>
HWY_INLINE V GeluErf(D d, V x) {
  if constexpr (std::is_same_v<hn::TFromD<D>, float>) {
    V gauss;
    return hn::Mul(x, NormalCdfF32(d, x, gauss));
  } else {
    return hn::Mul(x, NormalCdf(d, x));
  }
}
template <class D, class V>
HWY_INLINE V GeluErfDerivative(D d, V x) {
  using T = hn::TFromD<D>;
  const V inv_sqrt_2pi = hn::Set(d, std::numbers::inv_sqrtpi_v<T> / std::numbers::sqrt2_v<T>);
  if constexpr (std::is_same_v<T, float>) {
    V gauss;
    const V cdf = NormalCdfF32(d, x, gauss);
    return hn::MulAdd(x, hn::Mul(gauss, inv_sqrt_2pi), cdf);
  } else {
    const V pdf = hn::Mul(VExp(hn::Neg(hn::Mul(hn::Set(d, T(0.5)), hn::Mul(x, x)))), inv_sqrt_2pi);
    return hn::MulAdd(x, pdf, NormalCdf(d, x));
  }
}

template <typename T>
void UnaryImpl(UnaryOp op, int64_t n, const T* x, T* y) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const V zero = hn::Zero(d), one = hn::Set(d, T(1)), half = hn::Set(d, T(0.5));
  auto map = [&](auto f) { Map1(d, n, x, y, f); };
  switch (op) {
    case UnaryOp::neg: map([&](V v) HWY_ATTR { return hn::Neg(v); }); break;
    case UnaryOp::exp: map([&](V v) HWY_ATTR { return VExp(v); }); break;
    case UnaryOp::log: map([&](V v) HWY_ATTR { return VLog(v); }); break;
    case UnaryOp::sqrt: map([&](V v) HWY_ATTR { return hn::Sqrt(v); }); break;
    case UnaryOp::rsqrt: map([&](V v) HWY_ATTR { return hn::Div(one, hn::Sqrt(v)); }); break;
    case UnaryOp::tanh: map([&](V v) HWY_ATTR { return VTanh(v); }); break;
    case UnaryOp::erf: map([&](V v) HWY_ATTR { return ErfOf(d, v); }); break;
    case UnaryOp::abs: map([&](V v) HWY_ATTR { return hn::Abs(v); }); break;
    // v < 0 ? 0 : v keeps NaN (the comparison is false) and -0.
    case UnaryOp::relu: map([&](V v) HWY_ATTR { return hn::IfThenZeroElse(hn::Lt(v, zero), v); }); break;
    case UnaryOp::gelu_erf: map([&](V v) HWY_ATTR { return GeluErf(d, v); }); break;
    case UnaryOp::gelu_tanh:
      map([&](V v) HWY_ATTR { return hn::Mul(hn::Mul(half, v), hn::Add(one, GeluTanhInner(d, v))); });
      break;
    case UnaryOp::silu: map([&](V v) HWY_ATTR { return hn::Mul(v, Sigmoid(d, v)); }); break;
    case UnaryOp::sigmoid: map([&](V v) HWY_ATTR { return Sigmoid(d, v); }); break;
  }
}

template <typename T>
void UnaryBackwardImpl(UnaryOp op, int64_t n, const T* x, const T* y, const T* gy, T* gx) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const V zero = hn::Zero(d), one = hn::Set(d, T(1)), half = hn::Set(d, T(0.5));
  // gx = gy * deriv(x, y), as the scalar kernels: a zero derivative times an infinite gy stays NaN.
  auto from_x = [&](auto deriv) { Map2(d, n, x, gy, gx, [&](V v, V g) HWY_ATTR { return hn::Mul(g, deriv(v)); }); };
  auto from_y = [&](auto deriv) { Map2(d, n, y, gy, gx, [&](V fx, V g) HWY_ATTR { return hn::Mul(g, deriv(fx)); }); };
  switch (op) {
    case UnaryOp::neg: from_x([&](V) HWY_ATTR { return hn::Set(d, T(-1)); }); break;
    case UnaryOp::exp: from_y([&](V fx) HWY_ATTR { return fx; }); break;
    case UnaryOp::log: from_x([&](V v) HWY_ATTR { return hn::Div(one, v); }); break;
    case UnaryOp::sqrt: from_y([&](V fx) HWY_ATTR { return hn::Div(half, fx); }); break;
    case UnaryOp::rsqrt:
      from_y([&](V fx) HWY_ATTR { return hn::Mul(hn::Mul(hn::Mul(hn::Set(d, T(-0.5)), fx), fx), fx); });
      break;
    case UnaryOp::tanh: from_y([&](V fx) HWY_ATTR { return hn::NegMulAdd(fx, fx, one); }); break;
    case UnaryOp::erf:
      from_x([&](V v) HWY_ATTR {
        return hn::Mul(hn::Set(d, T(2) * std::numbers::inv_sqrtpi_v<T>), VExp(hn::Neg(hn::Mul(v, v))));
      });
      break;
    case UnaryOp::abs:
      from_x([&](V v) HWY_ATTR {
        return hn::IfThenElse(hn::Gt(v, zero), one, hn::IfThenElseZero(hn::Lt(v, zero), hn::Set(d, T(-1))));
      });
      break;
    case UnaryOp::relu: from_x([&](V v) HWY_ATTR { return hn::IfThenElseZero(hn::Gt(v, zero), one); }); break;
    case UnaryOp::gelu_erf:
      from_x([&](V v) HWY_ATTR { return GeluErfDerivative(d, v); });
      break;
    case UnaryOp::gelu_tanh:
      from_x([&](V v) HWY_ATTR {
        const V t = GeluTanhInner(d, v);
        const V du_dx = hn::Mul(hn::Set(d, std::numbers::sqrt2_v<T> * std::numbers::inv_sqrtpi_v<T>),
                                hn::MulAdd(hn::Set(d, T(3) * T(0.044715)), hn::Mul(v, v), one));
        // 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx
        return hn::MulAdd(hn::Mul(hn::Mul(half, v), hn::NegMulAdd(t, t, one)), du_dx, hn::Mul(half, hn::Add(one, t)));
      });
      break;
    case UnaryOp::silu:
      // Recomputes sigmoid from x: y = x * sigmoid(x) cannot give it back at x == 0.
      from_x([&](V v) HWY_ATTR {
        const V s = Sigmoid(d, v);
        return hn::Mul(s, hn::MulAdd(v, hn::Sub(one, s), one));
      });
      break;
    case UnaryOp::sigmoid: from_y([&](V fx) HWY_ATTR { return hn::Mul(fx, hn::Sub(one, fx)); }); break;
  }
}

template <typename T>
void BinaryImpl(BinaryOp op, int64_t n, const T* a, const T* b, T* out) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  auto map = [&](auto f) { Map2(d, n, a, b, out, f); };
  switch (op) {
    case BinaryOp::add: map([](V u, V v) HWY_ATTR { return hn::Add(u, v); }); break;
    case BinaryOp::sub: map([](V u, V v) HWY_ATTR { return hn::Sub(u, v); }); break;
    case BinaryOp::mul: map([](V u, V v) HWY_ATTR { return hn::Mul(u, v); }); break;
    case BinaryOp::div: map([](V u, V v) HWY_ATTR { return hn::Div(u, v); }); break;
    // NaN-propagating: a wins when it is larger or NaN, as nan_max / nan_min of the scalar kernels (IsNaN, not
    // Ne(u, u): x86's ordered not-equal is false for NaN).
    case BinaryOp::maximum:
      map([](V u, V v) HWY_ATTR { return hn::IfThenElse(hn::Or(hn::Gt(u, v), hn::IsNaN(u)), u, v); });
      break;
    case BinaryOp::minimum:
      map([](V u, V v) HWY_ATTR { return hn::IfThenElse(hn::Or(hn::Lt(u, v), hn::IsNaN(u)), u, v); });
      break;
    case BinaryOp::pow: break;  // has_binary() says no: the caller keeps its scalar loop
  }
}

}  // namespace

void UnaryF32(UnaryOp op, int64_t n, const float* x, float* y) { UnaryImpl(op, n, x, y); }
void UnaryF64(UnaryOp op, int64_t n, const double* x, double* y) { UnaryImpl(op, n, x, y); }
void UnaryBackwardF32(UnaryOp op, int64_t n, const float* x, const float* y, const float* gy, float* gx) {
  UnaryBackwardImpl(op, n, x, y, gy, gx);
}
void UnaryBackwardF64(UnaryOp op, int64_t n, const double* x, const double* y, const double* gy, double* gx) {
  UnaryBackwardImpl(op, n, x, y, gy, gx);
}
void BinaryF32(BinaryOp op, int64_t n, const float* a, const float* b, float* out) { BinaryImpl(op, n, a, b, out); }
void BinaryF64(BinaryOp op, int64_t n, const double* a, const double* b, double* out) {
  BinaryImpl(op, n, a, b, out);
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace shardrt::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrt::kernels::cpu {

HWY_EXPORT(UnaryF32);
HWY_EXPORT(UnaryF64);
HWY_EXPORT(UnaryBackwardF32);
HWY_EXPORT(UnaryBackwardF64);
HWY_EXPORT(BinaryF32);
HWY_EXPORT(BinaryF64);
HWY_EXPORT(TargetName);

std::string simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

namespace simd {

void unary(UnaryOp op, int64_t n, const float* x, float* y) { HWY_DYNAMIC_DISPATCH(UnaryF32)(op, n, x, y); }
void unary(UnaryOp op, int64_t n, const double* x, double* y) { HWY_DYNAMIC_DISPATCH(UnaryF64)(op, n, x, y); }
void unary_backward(UnaryOp op, int64_t n, const float* x, const float* y, const float* gy, float* gx) {
  HWY_DYNAMIC_DISPATCH(UnaryBackwardF32)(op, n, x, y, gy, gx);
}
void unary_backward(UnaryOp op, int64_t n, const double* x, const double* y, const double* gy, double* gx) {
  HWY_DYNAMIC_DISPATCH(UnaryBackwardF64)(op, n, x, y, gy, gx);
}
bool has_binary(BinaryOp op) { return op != BinaryOp::pow; }
void binary(BinaryOp op, int64_t n, const float* a, const float* b, float* out) {
  HWY_DYNAMIC_DISPATCH(BinaryF32)(op, n, a, b, out);
}
void binary(BinaryOp op, int64_t n, const double* a, const double* b, double* out) {
  HWY_DYNAMIC_DISPATCH(BinaryF64)(op, n, a, b, out);
}

}  // namespace simd
}  // namespace shardrt::kernels::cpu
#endif  // HWY_ONCE
