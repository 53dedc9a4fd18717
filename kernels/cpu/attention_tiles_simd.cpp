// The register-tiled products of kernels/cpu/attention_tiles.h, written once with Highway and compiled per target.
//
// All three are one kernel: acc[i][:] (+)= sum over t of coef(i, t) * row_t[:], for i < m, with coef(i, t) =
// p[i * si + t * st] (a scalar, broadcast) and row_t = v + t * ldv (n elements, in vectors). Four outputs rows by
// two vectors stay in registers through the whole sum over t (8 accumulators, 2 loads and a broadcast: 11 of
// AVX2's 16 registers); the last vector of a row is masked where n is not a multiple of the width.
//   scores        s  = a bt       coef = a[i][t]   (si = lda, st = 1), rows of bt, acc starts at zero
//   combine_rows  acc += p v      coef = p[i][t]   (si = ldp, st = 1), rows of v
//   combine_cols  acc += p^T x    coef = p[t][i]   (si = 1, st = ldp), rows of x
#include "kernels/cpu/attention_tiles.h"

#include <algorithm>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention_tiles_simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace shardrt::kernels::cpu::attention_tiles {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// R output rows (1 to 4) by NV vectors (1 or 2) starting at column j0 of acc; the last vector holds `last` valid
// lanes (all of them when `last` == the width).
template <int R, int NV, typename T>
HWY_INLINE void block(int64_t k, const T* p, int64_t si, int64_t st, const T* v, int64_t ldv, T* acc, int64_t ldacc,
                      int64_t j0, size_t last, bool zero_init) {
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  const auto tail = hn::FirstN(d, last);
  using V = decltype(hn::Zero(d));
  V a[R][NV];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NV; ++j) {
      T* dst = acc + i * ldacc + j0 + static_cast<int64_t>(j * N);
      a[i][j] = zero_init ? hn::Zero(d) : (j == NV - 1 && last < N) ? hn::MaskedLoad(tail, d, dst) : hn::LoadU(d, dst);
    }
  for (int64_t t = 0; t < k; ++t) {
    const T* row = v + t * ldv + j0;
    V x[NV];
    for (int j = 0; j < NV; ++j)
      x[j] = (j == NV - 1 && last < N) ? hn::MaskedLoad(tail, d, row + j * N) : hn::LoadU(d, row + j * N);
    for (int i = 0; i < R; ++i) {
      const auto c = hn::Set(d, p[i * si + t * st]);
      for (int j = 0; j < NV; ++j) a[i][j] = hn::MulAdd(c, x[j], a[i][j]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < NV; ++j) {
      T* dst = acc + i * ldacc + j0 + static_cast<int64_t>(j * N);
      if (j == NV - 1 && last < N) {
        hn::BlendedStore(a[i][j], tail, d, dst);
      } else {
        hn::StoreU(a[i][j], d, dst);
      }
    }
}

template <int R, typename T>
HWY_INLINE void row_block(int64_t k, int64_t n, const T* p, int64_t si, int64_t st, const T* v, int64_t ldv, T* acc,
                          int64_t ldacc, bool zero_init) {
  const hn::ScalableTag<T> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t j0 = 0;
  for (; j0 + 2 * N <= n; j0 += 2 * N) block<R, 2>(k, p, si, st, v, ldv, acc, ldacc, j0, N, zero_init);
  if (n - j0 > N) {
    block<R, 2>(k, p, si, st, v, ldv, acc, ldacc, j0, static_cast<size_t>(n - j0 - N), zero_init);
  } else if (n > j0) {
    block<R, 1>(k, p, si, st, v, ldv, acc, ldacc, j0, static_cast<size_t>(n - j0), zero_init);
  }
}

template <typename T>
void accumulate(int64_t m, int64_t k, int64_t n, const T* p, int64_t si, int64_t st, const T* v, int64_t ldv, T* acc,
                int64_t ldacc, bool zero_init) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) row_block<4>(k, n, p + i * si, si, st, v, ldv, acc + i * ldacc, ldacc, zero_init);
  const T* pi = p + i * si;
  T* ai = acc + i * ldacc;
  switch (m - i) {
    case 3: row_block<3>(k, n, pi, si, st, v, ldv, ai, ldacc, zero_init); break;
    case 2: row_block<2>(k, n, pi, si, st, v, ldv, ai, ldacc, zero_init); break;
    case 1: row_block<1>(k, n, pi, si, st, v, ldv, ai, ldacc, zero_init); break;
    default: break;
  }
}

void ScoresF(int64_t rows, int64_t cols, int64_t d, const float* a, int64_t lda, const float* bt, int64_t ldb,
             float* s, int64_t lds) {
  accumulate(rows, d, cols, a, lda, 1, bt, ldb, s, lds, true);
}
void ScoresD(int64_t rows, int64_t cols, int64_t d, const double* a, int64_t lda, const double* bt, int64_t ldb,
             double* s, int64_t lds) {
  accumulate(rows, d, cols, a, lda, 1, bt, ldb, s, lds, true);
}
void CombineRowsF(int64_t rows, int64_t k, int64_t n, const float* p, int64_t ldp, const float* v, int64_t ldv,
                  float* acc, int64_t ldacc) {
  accumulate(rows, k, n, p, ldp, 1, v, ldv, acc, ldacc, false);
}
void CombineRowsD(int64_t rows, int64_t k, int64_t n, const double* p, int64_t ldp, const double* v, int64_t ldv,
                  double* acc, int64_t ldacc) {
  accumulate(rows, k, n, p, ldp, 1, v, ldv, acc, ldacc, false);
}
void CombineColsF(int64_t rows, int64_t cols, int64_t n, const float* p, int64_t ldp, const float* x, int64_t ldx,
                  float* acc, int64_t ldacc) {
  accumulate(cols, rows, n, p, 1, ldp, x, ldx, acc, ldacc, false);
}
void CombineColsD(int64_t rows, int64_t cols, int64_t n, const double* p, int64_t ldp, const double* x, int64_t ldx,
                  double* acc, int64_t ldacc) {
  accumulate(cols, rows, n, p, 1, ldp, x, ldx, acc, ldacc, false);
}

}  // namespace HWY_NAMESPACE
}  // namespace shardrt::kernels::cpu::attention_tiles
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrt::kernels::cpu::attention_tiles {

HWY_EXPORT(ScoresF);
HWY_EXPORT(ScoresD);
HWY_EXPORT(CombineRowsF);
HWY_EXPORT(CombineRowsD);
HWY_EXPORT(CombineColsF);
HWY_EXPORT(CombineColsD);

void scores(int64_t rows, int64_t cols, int64_t d, const float* a, int64_t lda, const float* bt, int64_t ldb,
            float* s, int64_t lds) {
  HWY_DYNAMIC_DISPATCH(ScoresF)(rows, cols, d, a, lda, bt, ldb, s, lds);
}
void scores(int64_t rows, int64_t cols, int64_t d, const double* a, int64_t lda, const double* bt, int64_t ldb,
            double* s, int64_t lds) {
  HWY_DYNAMIC_DISPATCH(ScoresD)(rows, cols, d, a, lda, bt, ldb, s, lds);
}
void combine_rows(int64_t rows, int64_t k, int64_t n, const float* p, int64_t ldp, const float* v, int64_t ldv,
                  float* acc, int64_t ldacc) {
  HWY_DYNAMIC_DISPATCH(CombineRowsF)(rows, k, n, p, ldp, v, ldv, acc, ldacc);
}
void combine_rows(int64_t rows, int64_t k, int64_t n, const double* p, int64_t ldp, const double* v, int64_t ldv,
                  double* acc, int64_t ldacc) {
  HWY_DYNAMIC_DISPATCH(CombineRowsD)(rows, k, n, p, ldp, v, ldv, acc, ldacc);
}
void combine_cols(int64_t rows, int64_t cols, int64_t n, const float* p, int64_t ldp, const float* x, int64_t ldx,
                  float* acc, int64_t ldacc) {
  HWY_DYNAMIC_DISPATCH(CombineColsF)(rows, cols, n, p, ldp, x, ldx, acc, ldacc);
}
void combine_cols(int64_t rows, int64_t cols, int64_t n, const double* p, int64_t ldp, const double* x, int64_t ldx,
                  double* acc, int64_t ldacc) {
  HWY_DYNAMIC_DISPATCH(CombineColsD)(rows, cols, n, p, ldp, x, ldx, acc, ldacc);
}

}  // namespace shardrt::kernels::cpu::attention_tiles
#endif  // HWY_ONCE
