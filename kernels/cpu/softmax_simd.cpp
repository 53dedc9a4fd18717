// Softmax and log-softmax over contiguous rows in vector lanes (the pattern is in kernels/cpu/simd.h): a max pass,
// an exp-and-sum pass that writes exp(x - max), and a scale pass. The sums run in two vector accumulators and end
// in double. NaN rules are the scalar kernel's: a row with NaN or +inf, or entirely -inf, gives NaN everywhere
// (exp of NaN or of inf - inf poisons the sum, whatever the max pass returned).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/softmax_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cmath>
#include <hwy/highway.h>
#include <limits>

#include "kernels/cpu/simd-inl.h"
#include "kernels/cpu/softmax_simd.h"

HWY_BEFORE_NAMESPACE();
namespace shardrt::kernels::cpu::HWY_NAMESPACE {
namespace {

// Sum over the row of f(lanes), the tail masked to its real lanes.
template <class D, class F>
HWY_INLINE double row_sum(D d, int64_t n, const hn::TFromD<D>* a, const hn::TFromD<D>* b, F f) {
  using V = hn::Vec<D>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  V s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t k = 0;
  for (; k + 2 * N <= n; k += 2 * N) {
    s0 = hn::Add(s0, f(hn::LoadU(d, a + k), hn::LoadU(d, b + k)));
    s1 = hn::Add(s1, f(hn::LoadU(d, a + k + N), hn::LoadU(d, b + k + N)));
  }
  for (; k + N <= n; k += N) s0 = hn::Add(s0, f(hn::LoadU(d, a + k), hn::LoadU(d, b + k)));
  if (k < n) {
    const auto real = hn::FirstN(d, static_cast<size_t>(n - k));
    s1 = hn::Add(s1, hn::IfThenElseZero(real, f(LoadTail(d, a, k, n), LoadTail(d, b, k, n))));
  }
  return SumLanes(d, hn::Add(s0, s1));
}

template <typename T>
void softmax_row(bool log, int64_t n, const T* xr, T* yr) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const V neg_inf = hn::Set(d, -std::numeric_limits<T>::infinity());
  V m = neg_inf;
  int64_t k = 0;
  for (; k + N <= n; k += N) m = hn::Max(m, hn::LoadU(d, xr + k));
  if (k < n) m = hn::Max(m, hn::IfThenElse(hn::FirstN(d, static_cast<size_t>(n - k)), LoadTail(d, xr, k, n), neg_inf));
  // The max of the lanes, broadcast: a few shuffles once per row.
  const V shift = hn::MaxOfLanes(d, m);

  // exp(x - max) into y (x - max for log-softmax), then summed from y: only y is read after x, so y may alias x.
  Map1(d, n, xr, yr, [&](V v) HWY_ATTR { return log ? hn::Sub(v, shift) : VExp(hn::Sub(v, shift)); });
  const double total =
      log ? row_sum(d, n, yr, yr, [&](V s, V) HWY_ATTR { return VExp(s); })
          : row_sum(d, n, yr, yr, [&](V e, V) HWY_ATTR { return e; });
  if (log) {
    const V lse = hn::Set(d, static_cast<T>(std::log(total)));
    Map1(d, n, yr, yr, [&](V s) HWY_ATTR { return hn::Sub(s, lse); });
  } else {
    const V factor = hn::Set(d, static_cast<T>(1.0 / total));
    Map1(d, n, yr, yr, [&](V e) HWY_ATTR { return hn::Mul(e, factor); });
  }
}

template <typename T>
void softmax_backward_row(bool log, int64_t n, const T* yr, const T* gyr, T* gxr) {
  const hn::ScalableTag<T> d;
  using V = hn::Vec<decltype(d)>;
  const double acc = log ? row_sum(d, n, gyr, gyr, [](V g, V) HWY_ATTR { return g; })
                         : row_sum(d, n, yr, gyr, [](V y, V g) HWY_ATTR { return hn::Mul(g, y); });
  const V dot = hn::Set(d, static_cast<T>(acc));
  if (log) {
    Map2(d, n, yr, gyr, gxr, [&](V y, V g) HWY_ATTR { return hn::NegMulAdd(VExp(y), dot, g); });
  } else {
    Map2(d, n, yr, gyr, gxr, [&](V y, V g) HWY_ATTR { return hn::Mul(y, hn::Sub(g, dot)); });
  }
}

template <typename T>
void rows_forward(bool log, int64_t r0, int64_t r1, int64_t n, const T* x, T* y) {
  for (int64_t r = r0; r < r1; ++r) softmax_row(log, n, x + r * n, y + r * n);
}

template <typename T>
void rows_backward(bool log, int64_t r0, int64_t r1, int64_t n, const T* y, const T* gy, T* gx) {
  for (int64_t r = r0; r < r1; ++r) softmax_backward_row(log, n, y + r * n, gy + r * n, gx + r * n);
}

}  // namespace

void SoftmaxRowsF32(bool log, int64_t r0, int64_t r1, int64_t n, const float* x, float* y) {
  rows_forward(log, r0, r1, n, x, y);
}
void SoftmaxRowsF64(bool log, int64_t r0, int64_t r1, int64_t n, const double* x, double* y) {
  rows_forward(log, r0, r1, n, x, y);
}
void SoftmaxBackwardRowsF32(bool log, int64_t r0, int64_t r1, int64_t n, const float* y, const float* gy,
                            float* gx) {
  rows_backward(log, r0, r1, n, y, gy, gx);
}
void SoftmaxBackwardRowsF64(bool log, int64_t r0, int64_t r1, int64_t n, const double* y, const double* gy,
                            double* gx) {
  rows_backward(log, r0, r1, n, y, gy, gx);
}

}  // namespace shardrt::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrt::kernels::cpu {
HWY_EXPORT(SoftmaxRowsF32);
HWY_EXPORT(SoftmaxRowsF64);
HWY_EXPORT(SoftmaxBackwardRowsF32);
HWY_EXPORT(SoftmaxBackwardRowsF64);

namespace simd {
void softmax_rows(bool log, int64_t r0, int64_t r1, int64_t n, const float* x, float* y) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowsF32)(log, r0, r1, n, x, y);
}
void softmax_rows(bool log, int64_t r0, int64_t r1, int64_t n, const double* x, double* y) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowsF64)(log, r0, r1, n, x, y);
}
void softmax_backward_rows(bool log, int64_t r0, int64_t r1, int64_t n, const float* y, const float* gy, float* gx) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardRowsF32)(log, r0, r1, n, y, gy, gx);
}
void softmax_backward_rows(bool log, int64_t r0, int64_t r1, int64_t n, const double* y, const double* gy,
                           double* gx) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardRowsF64)(log, r0, r1, n, y, gy, gx);
}
}  // namespace simd
}  // namespace shardrt::kernels::cpu
#endif  // HWY_ONCE
