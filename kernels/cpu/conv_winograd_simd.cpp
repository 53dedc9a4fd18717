// The Winograd F(2x2, 3x3) tile transforms (see conv_winograd_simd.h), written once with Highway. Each call works
// on one row of tiles, L tiles per vector (even and odd input columns deinterleaved by LoadInterleaved2); the last
// partial group of lanes is masked on every plane load and store.
//   Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]     (input tile d: V = Bᵀ d B)
//   Aᵀ = [1 1 1 0; 0 1 -1 -1]                         (output tile: Aᵀ m A; output-grad tile y: A y Aᵀ)
#include "kernels/cpu/conv_winograd_simd.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/conv_winograd_simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace shardrt::kernels::cpu::winograd_rows {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// The 16 planes of tiles [t0, t0 + L) (only the first n lanes when n < L).
HWY_INLINE void store_planes(D d, const V (&v)[16], float* out, int64_t plane, int64_t t0, size_t n) {
  const size_t L = hn::Lanes(d);
  for (int xi = 0; xi < 16; ++xi) {
    float* dst = out + xi * plane + t0;
    if (n >= L) {
      hn::StoreU(v[xi], d, dst);
    } else {
      hn::BlendedStore(v[xi], hn::FirstN(d, n), d, dst);
    }
  }
}

void InputF(const float* r0, const float* r1, const float* r2, const float* r3, int64_t tiles, float* out,
            int64_t plane) {
  const D d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const float* rows[4] = {r0, r1, r2, r3};
  for (int64_t t0 = 0; t0 < tiles; t0 += L) {
    V u[4][4];  // u[row][j] = (d B)[row][j]
    for (int r = 0; r < 4; ++r) {
      V c0, c1, c2, c3;
      hn::LoadInterleaved2(d, rows[r] + 2 * t0, c0, c1);
      hn::LoadInterleaved2(d, rows[r] + 2 * t0 + 2, c2, c3);
      u[r][0] = hn::Sub(c0, c2);
      u[r][1] = hn::Add(c1, c2);
      u[r][2] = hn::Sub(c2, c1);
      u[r][3] = hn::Sub(c1, c3);
    }
    V v[16];
    for (int j = 0; j < 4; ++j) {
      v[0 + j] = hn::Sub(u[0][j], u[2][j]);
      v[4 + j] = hn::Add(u[1][j], u[2][j]);
      v[8 + j] = hn::Sub(u[2][j], u[1][j]);
      v[12 + j] = hn::Sub(u[1][j], u[3][j]);
    }
    store_planes(d, v, out, plane, t0, static_cast<size_t>(tiles - t0));
  }
}

void OutputGradF(const float* y0, const float* y1, int64_t tiles, float* out, int64_t plane) {
  const D d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t t0 = 0; t0 < tiles; t0 += L) {
    V a[2][2];
    hn::LoadInterleaved2(d, y0 + 2 * t0, a[0][0], a[0][1]);
    hn::LoadInterleaved2(d, y1 + 2 * t0, a[1][0], a[1][1]);
    V q[4][2];  // q = A y
    for (int j = 0; j < 2; ++j) {
      q[0][j] = a[0][j];
      q[1][j] = hn::Add(a[0][j], a[1][j]);
      q[2][j] = hn::Sub(a[0][j], a[1][j]);
      q[3][j] = hn::Neg(a[1][j]);
    }
    V v[16];  // (A y) Aᵀ
    for (int i = 0; i < 4; ++i) {
      v[4 * i + 0] = q[i][0];
      v[4 * i + 1] = hn::Add(q[i][0], q[i][1]);
      v[4 * i + 2] = hn::Sub(q[i][0], q[i][1]);
      v[4 * i + 3] = hn::Neg(q[i][1]);
    }
    store_planes(d, v, out, plane, t0, static_cast<size_t>(tiles - t0));
  }
}

void OutputF(const float* m, int64_t plane, int64_t tiles, float bias, float* o0, float* o1, int64_t width) {
  const D d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const V b = hn::Set(d, bias);
  HWY_ALIGN float tail[2][2 * HWY_MAX_BYTES / sizeof(float)];
  for (int64_t t0 = 0; t0 < tiles; t0 += L) {
    const auto mask = hn::FirstN(d, static_cast<size_t>(tiles - t0));
    V x[16];
    for (int xi = 0; xi < 16; ++xi) x[xi] = hn::MaskedLoad(mask, d, m + xi * plane + t0);
    V p[2][4];  // Aᵀ m
    for (int j = 0; j < 4; ++j) {
      p[0][j] = hn::Add(hn::Add(x[j], x[4 + j]), x[8 + j]);
      p[1][j] = hn::Sub(hn::Sub(x[4 + j], x[8 + j]), x[12 + j]);
    }
    V y[2][2];  // (Aᵀ m) A
    for (int i = 0; i < 2; ++i) {
      y[i][0] = hn::Add(hn::Add(hn::Add(p[i][0], p[i][1]), p[i][2]), b);
      y[i][1] = hn::Add(hn::Sub(hn::Sub(p[i][1], p[i][2]), p[i][3]), b);
    }
    // Whole groups straight into the rows; the last one through a buffer, only its columns below `width`.
    const bool whole = 2 * (t0 + L) <= width;
    hn::StoreInterleaved2(y[0][0], y[0][1], d, whole ? o0 + 2 * t0 : tail[0]);
    if (o1) hn::StoreInterleaved2(y[1][0], y[1][1], d, whole ? o1 + 2 * t0 : tail[1]);
    if (!whole) {
      const int64_t n = width - 2 * t0;
      for (int64_t j = 0; j < n; ++j) o0[2 * t0 + j] = tail[0][j];
      if (o1)
        for (int64_t j = 0; j < n; ++j) o1[2 * t0 + j] = tail[1][j];
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace shardrt::kernels::cpu::winograd_rows
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrt::kernels::cpu::winograd_rows {

HWY_EXPORT(InputF);
HWY_EXPORT(OutputGradF);
HWY_EXPORT(OutputF);

void input(const float* r0, const float* r1, const float* r2, const float* r3, int64_t tiles, float* out,
           int64_t plane) {
  HWY_DYNAMIC_DISPATCH(InputF)(r0, r1, r2, r3, tiles, out, plane);
}
void output_grad(const float* y0, const float* y1, int64_t tiles, float* out, int64_t plane) {
  HWY_DYNAMIC_DISPATCH(OutputGradF)(y0, y1, tiles, out, plane);
}
void output(const float* m, int64_t plane, int64_t tiles, float bias, float* o0, float* o1, int64_t width) {
  HWY_DYNAMIC_DISPATCH(OutputF)(m, plane, tiles, bias, o0, o1, width);
}

}  // namespace shardrt::kernels::cpu::winograd_rows
#endif  // HWY_ONCE
