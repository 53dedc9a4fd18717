// The attention row kernels (see attention_simd.h), written once with Highway and compiled per target by
// foreach_target; HWY_DYNAMIC_DISPATCH picks the best target the running CPU supports.
#include "kernels/cpu/attention_simd.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention_simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shardrt::kernels::cpu::attention_rows {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Largest value of a row of n elements; the tail lanes read as -inf so they never win.
template <typename T>
T row_max_of(const T* x, int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto neg_inf = hn::Set(d, -std::numeric_limits<T>::infinity());
  auto m0 = neg_inf, m1 = neg_inf;
  int64_t j = 0;
  for (; j + 2 * L <= n; j += 2 * L) {
    m0 = hn::Max(m0, hn::LoadU(d, x + j));
    m1 = hn::Max(m1, hn::LoadU(d, x + j + L));
  }
  for (; j + L <= n; j += L) m0 = hn::Max(m0, hn::LoadU(d, x + j));
  if (j < n) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - j));
    m1 = hn::Max(m1, hn::IfThenElse(mask, hn::MaskedLoad(mask, d, x + j), neg_inf));
  }
  return hn::GetLane(hn::MaxOfLanes(d, hn::Max(m0, m1)));
}

// exp(v) of a shifted score (v <= 0: a score minus its row's max or log-sum-exp), except that NaN stays NaN:
// Highway's Exp returns 0 for NaN, which would let a NaN score vanish from the softmax instead of poisoning the row
// as it must. Float runs ShardRT's exp for non-positive arguments (simd-inl.h: a degree-6 polynomial, relative
// error 2e-9 before rounding; half the cost of Highway's, which was a quarter of the fused small-head kernel's
// time), double Highway's Exp.
template <class D, class V>
V exp_keep_nan(D d, V v) {
  if constexpr (std::is_same_v<hn::TFromD<D>, float>) {
    return hn::IfThenElse(hn::IsNaN(v), v, cpu::HWY_NAMESPACE::ExpNonPositiveF32(d, v, hn::Zero(d)));
  } else {
    return hn::IfThenElse(hn::IsNaN(v), v, hn::Exp(d, v));
  }
}

// x_j = exp(x_j - shift) in place; returns Σ_j of the new values.
template <typename T>
T exp_shifted_sum(T* x, int64_t n, T shift) {
  const hn::ScalableTag<T> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto s = hn::Set(d, shift);
  auto sum0 = hn::Zero(d), sum1 = hn::Zero(d);
  int64_t j = 0;
  for (; j + 2 * L <= n; j += 2 * L) {
    const auto e0 = exp_keep_nan(d, hn::Sub(hn::LoadU(d, x + j), s));
    const auto e1 = exp_keep_nan(d, hn::Sub(hn::LoadU(d, x + j + L), s));
    hn::StoreU(e0, d, x + j);
    hn::StoreU(e1, d, x + j + L);
    sum0 = hn::Add(sum0, e0);
    sum1 = hn::Add(sum1, e1);
  }
  for (; j + L <= n; j += L) {
    const auto e = exp_keep_nan(d, hn::Sub(hn::LoadU(d, x + j), s));
    hn::StoreU(e, d, x + j);
    sum0 = hn::Add(sum0, e);
  }
  if (j < n) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - j));
    const auto e = hn::IfThenElseZero(mask, exp_keep_nan(d, hn::Sub(hn::MaskedLoad(mask, d, x + j), s)));
    hn::BlendedStore(e, mask, d, x + j);
    sum1 = hn::Add(sum1, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(sum0, sum1)));
}

// x_j *= factor.
template <typename T>
void scale_row(T* x, int64_t n, T factor) {
  const hn::ScalableTag<T> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const auto f = hn::Set(d, factor);
  int64_t j = 0;
  for (; j + L <= n; j += L) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), f), d, x + j);
  if (j < n) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(n - j));
    hn::BlendedStore(hn::Mul(hn::MaskedLoad(mask, d, x + j), f), mask, d, x + j);
  }
}

template <typename T>
void OnlineSoftmaxBlock(int64_t rows, int64_t cols, T* scores, T* row_max, T* row_sum, T* acc, int64_t Dv,
                        int64_t ld_acc) {
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < rows; ++i) {
    T* p = scores + i * cols;
    // A NaN that wins the max must stay (std::max would drop it), so the whole row turns NaN; one that loses
    // is kept by exp_keep_nan.
    const T block_max = row_max_of(p, cols);
    const T new_max = std::isnan(block_max) ? block_max : std::max(row_max[i], block_max);
    if (new_max == neg_inf) {  // nothing finite seen yet: the row stays empty
      for (int64_t j = 0; j < cols; ++j) p[j] = T(0);
      continue;
    }
    // exp(old - new) rescales what was accumulated under the previous running max; 0 on the first block.
    const T correction = std::exp(row_max[i] - new_max);
    row_sum[i] = row_sum[i] * correction + exp_shifted_sum(p, cols, new_max);
    row_max[i] = new_max;
    if (correction != T(1)) scale_row(acc + i * ld_acc, Dv, correction);
  }
}

template <typename T>
void FinishRows(int64_t rows, int64_t Dv, T* acc, const T* row_max, const T* row_sum, T* lse) {
  for (int64_t i = 0; i < rows; ++i) {
    scale_row(acc + i * Dv, Dv, T(1) / row_sum[i]);
    lse[i] = row_max[i] + std::log(row_sum[i]);
  }
}

template <typename T>
void Probabilities(int64_t rows, int64_t cols, T* p, const T* lse) {
  for (int64_t i = 0; i < rows; ++i) exp_shifted_sum(p + i * cols, cols, lse[i]);
}

template <typename T>
void SoftmaxGrad(int64_t rows, int64_t cols, const T* p, T* ds, const T* term) {
  const hn::ScalableTag<T> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < rows; ++i) {
    const T* pr = p + i * cols;
    T* dr = ds + i * cols;
    const auto t = hn::Set(d, term[i]);
    int64_t j = 0;
    for (; j + L <= cols; j += L)
      hn::StoreU(hn::Mul(hn::LoadU(d, pr + j), hn::Sub(hn::LoadU(d, dr + j), t)), d, dr + j);
    if (j < cols) {
      const auto mask = hn::FirstN(d, static_cast<size_t>(cols - j));
      const auto v = hn::Mul(hn::MaskedLoad(mask, d, pr + j), hn::Sub(hn::MaskedLoad(mask, d, dr + j), t));
      hn::BlendedStore(v, mask, d, dr + j);
    }
  }
}

// Plain functions per element type, so HWY_EXPORT has one non-template name each.
void OnlineSoftmaxBlockF(int64_t r, int64_t c, float* s, float* m, float* l, float* a, int64_t dv, int64_t ld) {
  OnlineSoftmaxBlock(r, c, s, m, l, a, dv, ld);
}
void OnlineSoftmaxBlockD(int64_t r, int64_t c, double* s, double* m, double* l, double* a, int64_t dv, int64_t ld) {
  OnlineSoftmaxBlock(r, c, s, m, l, a, dv, ld);
}
void FinishRowsF(int64_t r, int64_t dv, float* a, const float* m, const float* l, float* lse) {
  FinishRows(r, dv, a, m, l, lse);
}
void FinishRowsD(int64_t r, int64_t dv, double* a, const double* m, const double* l, double* lse) {
  FinishRows(r, dv, a, m, l, lse);
}
void ProbabilitiesF(int64_t r, int64_t c, float* p, const float* lse) { Probabilities(r, c, p, lse); }
void ProbabilitiesD(int64_t r, int64_t c, double* p, const double* lse) { Probabilities(r, c, p, lse); }
void SoftmaxGradF(int64_t r, int64_t c, const float* p, float* ds, const float* t) { SoftmaxGrad(r, c, p, ds, t); }
void SoftmaxGradD(int64_t r, int64_t c, const double* p, double* ds, const double* t) { SoftmaxGrad(r, c, p, ds, t); }

}  // namespace HWY_NAMESPACE
}  // namespace shardrt::kernels::cpu::attention_rows
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrt::kernels::cpu::attention_rows {

HWY_EXPORT(OnlineSoftmaxBlockF);
HWY_EXPORT(OnlineSoftmaxBlockD);
HWY_EXPORT(FinishRowsF);
HWY_EXPORT(FinishRowsD);
HWY_EXPORT(ProbabilitiesF);
HWY_EXPORT(ProbabilitiesD);
HWY_EXPORT(SoftmaxGradF);
HWY_EXPORT(SoftmaxGradD);

void online_softmax_block(int64_t rows, int64_t cols, float* scores, float* row_max, float* row_sum, float* acc,
                          int64_t Dv, int64_t ld_acc) {
  HWY_DYNAMIC_DISPATCH(OnlineSoftmaxBlockF)(rows, cols, scores, row_max, row_sum, acc, Dv, ld_acc);
}
void online_softmax_block(int64_t rows, int64_t cols, double* scores, double* row_max, double* row_sum,
                          double* acc, int64_t Dv, int64_t ld_acc) {
  HWY_DYNAMIC_DISPATCH(OnlineSoftmaxBlockD)(rows, cols, scores, row_max, row_sum, acc, Dv, ld_acc);
}
void finish_rows(int64_t rows, int64_t Dv, float* acc, const float* row_max, const float* row_sum, float* lse) {
  HWY_DYNAMIC_DISPATCH(FinishRowsF)(rows, Dv, acc, row_max, row_sum, lse);
}
void finish_rows(int64_t rows, int64_t Dv, double* acc, const double* row_max, const double* row_sum, double* lse) {
  HWY_DYNAMIC_DISPATCH(FinishRowsD)(rows, Dv, acc, row_max, row_sum, lse);
}
void probabilities(int64_t rows, int64_t cols, float* p, const float* lse) {
  HWY_DYNAMIC_DISPATCH(ProbabilitiesF)(rows, cols, p, lse);
}
void probabilities(int64_t rows, int64_t cols, double* p, const double* lse) {
  HWY_DYNAMIC_DISPATCH(ProbabilitiesD)(rows, cols, p, lse);
}
void softmax_grad(int64_t rows, int64_t cols, const float* p, float* ds, const float* term) {
  HWY_DYNAMIC_DISPATCH(SoftmaxGradF)(rows, cols, p, ds, term);
}
void softmax_grad(int64_t rows, int64_t cols, const double* p, double* ds, const double* term) {
  HWY_DYNAMIC_DISPATCH(SoftmaxGradD)(rows, cols, p, ds, term);
}

}  // namespace shardrt::kernels::cpu::attention_rows
#endif  // HWY_ONCE
