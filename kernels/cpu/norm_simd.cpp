// Layer norm of float rows in float vector lanes (the pattern is in kernels/cpu/simd.h).
//
// Accuracy without double: the statistics are taken of the row shifted by its first element, s = x - x[0]. Data far
// from zero (x ~ 1e4 + O(1)) then gives O(1) values exactly (x and x[0] are within a factor 2 of each other, so the
// subtraction rounds nothing), and the mean of s, its squared deviations and xhat = (s - mean(s)) * rstd keep full
// float precision relative to the spread of the row; a float mean of x itself would already be off by ~5e-4 there.
// Sums run in several float vector accumulators and end in double, so a row of a few thousand adds only a few
// roundings per lane.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/norm_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cmath>
#include <hwy/highway.h>

#include "kernels/cpu/norm_simd.h"
#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shardrt::kernels::cpu::HWY_NAMESPACE {
namespace {

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Lanes [i, D) of p (fewer than a vector) with the rest zero, and the mask of the lanes that are real.
struct Tail {
  VF v;
  hn::Mask<DF> real;
};
HWY_INLINE Tail load_tail(DF d, const float* p, int64_t i, int64_t D) {
  return {LoadTail(d, p, i, D), hn::FirstN(d, static_cast<size_t>(D - i))};
}

// y = (s - mean_s) * rstd * w + b for one row, w and b optional (compile-time, so the loop has no branch).
template <bool HasW, bool HasB>
HWY_INLINE void normalize_row(DF d, int64_t D, const float* xr, const float* w, const float* b, VF shift, VF mean_s,
                              VF rs, float* yr) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto one = [&](VF xv, VF wv, VF bv) HWY_ATTR {
    const VF xhat = hn::Mul(hn::Sub(hn::Sub(xv, shift), mean_s), rs);
    if constexpr (HasW) {
      return HasB ? hn::MulAdd(xhat, wv, bv) : hn::Mul(xhat, wv);
    } else {
      return HasB ? hn::Add(xhat, bv) : xhat;
    }
  };
  int64_t j = 0;
  for (; j + N <= D; j += N) {
    const VF wv = HasW ? hn::LoadU(d, w + j) : hn::Zero(d);
    const VF bv = HasB ? hn::LoadU(d, b + j) : hn::Zero(d);
    hn::StoreU(one(hn::LoadU(d, xr + j), wv, bv), d, yr + j);
  }
  if (j == D) return;
  const VF wv = HasW ? LoadTail(d, w, j, D) : hn::Zero(d);
  const VF bv = HasB ? LoadTail(d, b, j, D) : hn::Zero(d);
  alignas(HWY_MAX_BYTES) float out[kMaxLanes<DF>];
  hn::Store(one(LoadTail(d, xr, j, D), wv, bv), d, out);
  for (int64_t k = 0; k < D - j; ++k) yr[j + k] = out[k];
}

void layernorm_row(int64_t D, const float* xr, const float* w, const float* b, float eps, float* yr, float* mean,
                   float* rstd) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF shift = hn::Set(d, xr[0]);
  const VF zero = hn::Zero(d);

  // Pass 1: sum of s = x - x[0], four accumulators to hide the add latency.
  VF a0 = zero, a1 = zero, a2 = zero, a3 = zero;
  int64_t j = 0;
  for (; j + 4 * N <= D; j += 4 * N) {
    a0 = hn::Add(a0, hn::Sub(hn::LoadU(d, xr + j), shift));
    a1 = hn::Add(a1, hn::Sub(hn::LoadU(d, xr + j + N), shift));
    a2 = hn::Add(a2, hn::Sub(hn::LoadU(d, xr + j + 2 * N), shift));
    a3 = hn::Add(a3, hn::Sub(hn::LoadU(d, xr + j + 3 * N), shift));
  }
  for (; j + N <= D; j += N) a0 = hn::Add(a0, hn::Sub(hn::LoadU(d, xr + j), shift));
  if (j < D) {
    const Tail t = load_tail(d, xr, j, D);
    a0 = hn::Add(a0, hn::IfThenElseZero(t.real, hn::Sub(t.v, shift)));
  }
  const double mean_s = SumLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))) / static_cast<double>(D);
  const VF vmean_s = hn::Set(d, static_cast<float>(mean_s));

  // Pass 2: squared deviations from the mean (two-pass, never E[x^2] - E[x]^2).
  a0 = a1 = a2 = a3 = zero;
  auto dev = [&](VF xv) HWY_ATTR { return hn::Sub(hn::Sub(xv, shift), vmean_s); };
  j = 0;
  for (; j + 4 * N <= D; j += 4 * N) {
    const VF d0 = dev(hn::LoadU(d, xr + j)), d1 = dev(hn::LoadU(d, xr + j + N));
    const VF d2 = dev(hn::LoadU(d, xr + j + 2 * N)), d3 = dev(hn::LoadU(d, xr + j + 3 * N));
    a0 = hn::MulAdd(d0, d0, a0);
    a1 = hn::MulAdd(d1, d1, a1);
    a2 = hn::MulAdd(d2, d2, a2);
    a3 = hn::MulAdd(d3, d3, a3);
  }
  for (; j + N <= D; j += N) {
    const VF d0 = dev(hn::LoadU(d, xr + j));
    a0 = hn::MulAdd(d0, d0, a0);
  }
  if (j < D) {
    const Tail t = load_tail(d, xr, j, D);
    const VF d0 = hn::IfThenElseZero(t.real, dev(t.v));
    a0 = hn::MulAdd(d0, d0, a0);
  }
  const double var = SumLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))) / static_cast<double>(D);
  const double rs = 1.0 / std::sqrt(var + static_cast<double>(eps));
  *mean = static_cast<float>(static_cast<double>(xr[0]) + mean_s);
  *rstd = static_cast<float>(rs);

  // Pass 3: the output.
  const VF vrs = hn::Set(d, static_cast<float>(rs));
  if (w && b) {
    normalize_row<true, true>(d, D, xr, w, b, shift, vmean_s, vrs, yr);
  } else if (w) {
    normalize_row<true, false>(d, D, xr, w, b, shift, vmean_s, vrs, yr);
  } else if (b) {
    normalize_row<false, true>(d, D, xr, w, b, shift, vmean_s, vrs, yr);
  } else {
    normalize_row<false, false>(d, D, xr, w, b, shift, vmean_s, vrs, yr);
  }
}

// part[j..j+N) += v, widened to double.
HWY_INLINE void add_widened(DF d, VF v, double* part) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  part[0] += static_cast<double>(hn::GetLane(v));
#else
  const hn::Half<DF> dh;
  const hn::Rebind<double, decltype(dh)> dd;
  const size_t half = hn::Lanes(dh);
  hn::StoreU(hn::Add(hn::LoadU(dd, part), hn::PromoteTo(dd, hn::LowerHalf(dh, v))), dd, part);
  hn::StoreU(hn::Add(hn::LoadU(dd, part + half), hn::PromoteTo(dd, hn::UpperHalf(dh, v))), dd, part + half);
#endif
}

void layernorm_backward_row(int64_t D, const float* xr, const float* w, float mu, float rs, const float* gyr,
                            float* gxr, double* part_w, double* part_b) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const VF vmu = hn::Set(d, mu), vrs = hn::Set(d, rs);
  auto xhat_of = [&](VF xv) HWY_ATTR { return hn::Mul(hn::Sub(xv, vmu), vrs); };
  int64_t j = 0;
  if (part_w) {
    for (; j + N <= D; j += N) {
      const VF gv = hn::LoadU(d, gyr + j);
      add_widened(d, hn::Mul(gv, xhat_of(hn::LoadU(d, xr + j))), part_w + j);
      add_widened(d, gv, part_b + j);
    }
    for (; j < D; ++j) {  // the tail in scalar: the partials have exactly D entries
      part_w[j] += static_cast<double>(gyr[j] * ((xr[j] - mu) * rs));
      part_b[j] += static_cast<double>(gyr[j]);
    }
  }
  if (!gxr) return;
  // gx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gy * weight, the grad w.r.t. xhat.
  const VF zero = hn::Zero(d);
  VF sg0 = zero, sg1 = zero, sgx0 = zero, sgx1 = zero;
  auto g_of = [&](int64_t k, VF gv) HWY_ATTR { return w ? hn::Mul(gv, hn::LoadU(d, w + k)) : gv; };
  j = 0;
  for (; j + 2 * N <= D; j += 2 * N) {
    const VF g0 = g_of(j, hn::LoadU(d, gyr + j)), g1 = g_of(j + N, hn::LoadU(d, gyr + j + N));
    sg0 = hn::Add(sg0, g0);
    sg1 = hn::Add(sg1, g1);
    sgx0 = hn::MulAdd(g0, xhat_of(hn::LoadU(d, xr + j)), sgx0);
    sgx1 = hn::MulAdd(g1, xhat_of(hn::LoadU(d, xr + j + N)), sgx1);
  }
  for (; j + N <= D; j += N) {
    const VF g0 = g_of(j, hn::LoadU(d, gyr + j));
    sg0 = hn::Add(sg0, g0);
    sgx0 = hn::MulAdd(g0, xhat_of(hn::LoadU(d, xr + j)), sgx0);
  }
  if (j < D) {
    const Tail gt = load_tail(d, gyr, j, D);
    const VF g0 = w ? hn::Mul(gt.v, LoadTail(d, w, j, D)) : gt.v;  // zero beyond D already
    sg0 = hn::Add(sg0, g0);
    sgx0 = hn::MulAdd(g0, hn::IfThenElseZero(gt.real, xhat_of(LoadTail(d, xr, j, D))), sgx0);
  }
  const VF mean_g = hn::Set(d, static_cast<float>(SumLanes(d, hn::Add(sg0, sg1)) / static_cast<double>(D)));
  const VF mean_gx = hn::Set(d, static_cast<float>(SumLanes(d, hn::Add(sgx0, sgx1)) / static_cast<double>(D)));
  auto gx_of = [&](VF g, VF xv) HWY_ATTR {
    return hn::Mul(vrs, hn::Sub(hn::Sub(g, mean_g), hn::Mul(xhat_of(xv), mean_gx)));
  };
  for (j = 0; j + N <= D; j += N) {
    hn::StoreU(gx_of(g_of(j, hn::LoadU(d, gyr + j)), hn::LoadU(d, xr + j)), d, gxr + j);
  }
  if (j < D) {
    const VF g0 = w ? hn::Mul(LoadTail(d, gyr, j, D), LoadTail(d, w, j, D)) : LoadTail(d, gyr, j, D);
    alignas(HWY_MAX_BYTES) float out[kMaxLanes<DF>];
    hn::Store(gx_of(g0, LoadTail(d, xr, j, D)), d, out);
    for (int64_t k = 0; k < D - j; ++k) gxr[j + k] = out[k];
  }
}

}  // namespace

void LayernormRows(int64_t r0, int64_t r1, int64_t D, const float* x, const float* weight, const float* bias,
                   float eps, float* y, float* mean, float* rstd) {
  for (int64_t r = r0; r < r1; ++r) layernorm_row(D, x + r * D, weight, bias, eps, y + r * D, mean + r, rstd + r);
}

void LayernormBackwardRows(int64_t r0, int64_t r1, int64_t D, const float* x, const float* weight,
                           const float* mean, const float* rstd, const float* gy, float* gx, double* part_w,
                           double* part_b) {
  for (int64_t r = r0; r < r1; ++r) {
    layernorm_backward_row(D, x + r * D, weight, mean[r], rstd[r], gy + r * D, gx ? gx + r * D : nullptr, part_w,
                           part_b);
  }
}

}  // namespace shardrt::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrt::kernels::cpu {
HWY_EXPORT(LayernormRows);
HWY_EXPORT(LayernormBackwardRows);

namespace simd {
void layernorm_rows(int64_t r0, int64_t r1, int64_t D, const float* x, const float* weight, const float* bias,
                    float eps, float* y, float* mean, float* rstd) {
  HWY_DYNAMIC_DISPATCH(LayernormRows)(r0, r1, D, x, weight, bias, eps, y, mean, rstd);
}
void layernorm_backward_rows(int64_t r0, int64_t r1, int64_t D, const float* x, const float* weight,
                             const float* mean, const float* rstd, const float* gy, float* gx, double* part_w,
                             double* part_b) {
  HWY_DYNAMIC_DISPATCH(LayernormBackwardRows)(r0, r1, D, x, weight, mean, rstd, gy, gx, part_w, part_b);
}
}  // namespace simd
}  // namespace shardrt::kernels::cpu
#endif  // HWY_ONCE
