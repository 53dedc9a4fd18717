// The Winograd F(2x2, 3x3) convolution (see conv_winograd.h).
#include "kernels/cpu/conv_winograd.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/conv_winograd_simd.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"

namespace shardrt::kernels::cpu::winograd {
namespace {

// Tiles per chunk: the chunk's 16 transformed planes (16 x channels x tiles floats) stay in L2 / L3 between the
// transform and the GEMMs, and a 128² image gives 16 chunks to share between threads.
constexpr int64_t kChunkTiles = 256;
// Weight-grad sums: chunks are split into this many groups (fewer if there are fewer chunks), each summing its
// chunks in order into its own 16 x K x C partial; the partials are added in group order.
constexpr int64_t kWeightGroups = 8;
using winograd_rows::kLanePad;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// G of F(2x2, 3x3): the 4 x 3 kernel transform.
constexpr double kG[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

// U[xi][o][i] = (G g Gᵀ)[xi] of every kernel g = g_of(o, i) (3 x 3, row-major), o < K, i < C.
template <class KernelOf>
void transform_kernels(int64_t K, int64_t C, KernelOf g_of, float* U) {
  for (int64_t o = 0; o < K; ++o)
    for (int64_t i = 0; i < C; ++i) {
      const float* g = g_of(o, i);
      double t[4][3];  // G g
      for (int r = 0; r < 4; ++r)
        for (int b = 0; b < 3; ++b) t[r][b] = kG[r][0] * g[b] + kG[r][1] * g[3 + b] + kG[r][2] * g[6 + b];
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c)
          U[((4 * r + c) * K + o) * C + i] = static_cast<float>(t[r][0] * kG[c][0] + t[r][1] * kG[c][1] + t[r][2] * kG[c][2]);
    }
}

// The shared shape of a 3x3 stride-1 correlation: N samples of C input channels H x W, zero-padded by (ph, pw),
// K output channels OH x OW, in 2 x 2 tiles (TH x TW per sample), cut into chunks of whole tile rows.
struct Plan {
  int64_t N, C, K, H, W, OH, OW, ph, pw, TH, TW, rows_per_chunk, chunks_per_sample;
  Plan(int64_t n, int64_t c, int64_t k, int64_t h, int64_t w, int64_t pad_h, int64_t pad_w)
      : N(n), C(c), K(k), H(h), W(w), OH(h + 2 * pad_h - 2), OW(w + 2 * pad_w - 2), ph(pad_h), pw(pad_w) {
    TH = ceil_div(OH, 2);
    TW = ceil_div(OW, 2);
    rows_per_chunk = std::clamp<int64_t>(kChunkTiles / TW, 1, TH);
    chunks_per_sample = ceil_div(TH, rows_per_chunk);
  }
  int64_t chunks() const { return N * chunks_per_sample; }
  int64_t max_tiles() const { return rows_per_chunk * TW; }
  int64_t row_width() const { return 2 * (ceil_div(TW, kLanePad) * kLanePad) + 2; }
  // Sample and tile rows [r0, r1) of chunk i.
  void chunk(int64_t i, int64_t& n, int64_t& r0, int64_t& r1) const {
    n = i / chunks_per_sample;
    r0 = (i % chunks_per_sample) * rows_per_chunk;
    r1 = std::min(TH, r0 + rows_per_chunk);
  }
};

// Per-thread buffers of a chunk.
struct ChunkScratch {
  Scratch<float> planes_in, planes_out, rows;
  explicit ChunkScratch(const Plan& p, int64_t in_channels, int64_t out_channels)
      : planes_in(16 * in_channels * p.max_tiles()), planes_out(16 * out_channels * p.max_tiles()),
        rows(4 * p.row_width()) {}
};

// V[xi][c][t] of the chunk's tiles (Tc of them), from xs (C x H x W, one sample).
void transform_input(const Plan& p, const float* xs, int64_t r0, int64_t r1, float* V, float* rows) {
  const int64_t Tc = (r1 - r0) * p.TW, width = p.row_width();
  // Buffer column j holds input column j - pw; zeros past the input. Consecutive tile rows share two input rows:
  // the buffers rotate, and each input row is copied once per tile row pair.
  const auto load = [&](float* buf, const float* xc, int64_t ir) {
    if (ir >= 0 && ir < p.H) {
      std::memcpy(buf + p.pw, xc + ir * p.W, sizeof(float) * p.W);
    } else {
      std::fill(buf + p.pw, buf + p.pw + p.W, 0.0f);
    }
  };
  for (int k = 0; k < 4; ++k) std::fill(rows + k * width, rows + (k + 1) * width, 0.0f);
  for (int64_t c = 0; c < p.C; ++c) {
    const float* xc = xs + c * p.H * p.W;
    float* r[4] = {rows, rows + width, rows + 2 * width, rows + 3 * width};
    for (int k = 0; k < 4; ++k) load(r[k], xc, 2 * r0 - p.ph + k);
    for (int64_t tr = r0; tr < r1; ++tr) {
      if (tr > r0) {
        std::swap(r[0], r[2]);
        std::swap(r[1], r[3]);
        load(r[2], xc, 2 * tr - p.ph + 2);
        load(r[3], xc, 2 * tr - p.ph + 3);
      }
      winograd_rows::input(r[0], r[1], r[2], r[3], p.TW, V + c * Tc + (tr - r0) * p.TW, p.C * Tc);
    }
  }
}

// ys (K x OH x OW, one sample) = Aᵀ m A + bias of the chunk's tiles, written straight into its rows.
void transform_output(const Plan& p, const float* M, const float* bias, int64_t r0, int64_t r1, float* ys) {
  const int64_t Tc = (r1 - r0) * p.TW;
  for (int64_t k = 0; k < p.K; ++k)
    for (int64_t tr = r0; tr < r1; ++tr) {
      float* yk = ys + k * p.OH * p.OW;
      winograd_rows::output(M + k * Tc + (tr - r0) * p.TW, p.K * Tc, p.TW, bias ? bias[k] : 0.0f, yk + 2 * tr * p.OW,
                            2 * tr + 1 < p.OH ? yk + (2 * tr + 1) * p.OW : nullptr, p.OW);
    }
}

// y = the correlation of x with the transformed kernels U (16 x K x C), + bias. In parallel over chunks (one
// single-threaded GEMM per chunk and point; with one chunk the GEMMs split themselves, by the same fixed tiles).
void correlate(const Plan& p, const float* x, const float* U, const float* bias, float* y) {
#pragma omp parallel if (p.chunks() > 1 && !omp_in_parallel())
  {
    ChunkScratch s(p, p.C, p.K);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < p.chunks(); ++i) {
      int64_t n, r0, r1;
      p.chunk(i, n, r0, r1);
      const int64_t Tc = (r1 - r0) * p.TW;
      transform_input(p, x + n * p.C * p.H * p.W, r0, r1, s.planes_in.data(), s.rows.data());
      // M[xi] (K x Tc) = U[xi] (K x C) V[xi] (C x Tc): the register-tiled product (no packing, no zeroing pass;
      // measured against one BLAS call per point: see docs/benchmarks.md).
      for (int xi = 0; xi < 16; ++xi)
        attention_tiles::scores(p.K, Tc, p.C, U + xi * p.K * p.C, p.C, s.planes_in.data() + xi * p.C * Tc, Tc,
                                s.planes_out.data() + xi * p.K * Tc, Tc);
      transform_output(p, s.planes_out.data(), bias, r0, r1, y + n * p.K * p.OH * p.OW);
    }
  }
}

// Y[xi][k][t] = A dy Aᵀ of the chunk's output-grad tiles, from gys (K x OH x OW, one sample; zeros past it).
void transform_output_grad(const Plan& p, const float* gys, int64_t r0, int64_t r1, float* Y, float* rows) {
  const int64_t Tc = (r1 - r0) * p.TW, width = p.row_width();
  float *y0 = rows, *y1 = rows + width;
  for (int64_t k = 0; k < p.K; ++k)
    for (int64_t tr = r0; tr < r1; ++tr) {
      std::fill(y0, y0 + width, 0.0f);
      std::fill(y1, y1 + width, 0.0f);
      const float* gk = gys + k * p.OH * p.OW;
      std::memcpy(y0, gk + 2 * tr * p.OW, sizeof(float) * p.OW);
      if (2 * tr + 1 < p.OH) std::memcpy(y1, gk + (2 * tr + 1) * p.OW, sizeof(float) * p.OW);
      winograd_rows::output_grad(y0, y1, p.TW, Y + k * Tc + (tr - r0) * p.TW, p.K * Tc);
    }
}

}  // namespace

bool takes(const ConvGeometry& g) {
  return g.nd == 2 && g.kernel[0] == 3 && g.kernel[1] == 3 && g.stride[0] == 1 && g.stride[1] == 1 &&
         g.dilation[0] == 1 && g.dilation[1] == 1 && g.pad[0] <= 2 && g.pad[1] <= 2 && g.batch > 0 && g.c_in > 0 &&
         g.c_out > 0 && g.out[0] > 0 && g.out[1] > 0;
}

void conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  const Plan p(g.batch, g.c_in, g.c_out, g.in[0], g.in[1], g.pad[0], g.pad[1]);
  Scratch<float> U(16 * g.c_out * g.c_in);
  transform_kernels(g.c_out, g.c_in, [&](int64_t o, int64_t i) { return w + (o * g.c_in + i) * 9; }, U.data());
  correlate(p, x, U.data(), bias, y);
}

void conv_backward_data(const ConvGeometry& g, const float* w, const float* gy, float* gx) {
  // gx[i] = sum over o of gy[o] correlated with w[o][i] rotated by 180 degrees, padding 2 - p: output H x W.
  const Plan p(g.batch, g.c_out, g.c_in, g.out[0], g.out[1], 2 - g.pad[0], 2 - g.pad[1]);
  Scratch<float> U(16 * g.c_in * g.c_out), rotated(9 * g.c_in * g.c_out);
  for (int64_t o = 0; o < g.c_out; ++o)
    for (int64_t i = 0; i < g.c_in; ++i)
      for (int t = 0; t < 9; ++t) rotated.data()[(i * g.c_out + o) * 9 + t] = w[(o * g.c_in + i) * 9 + 8 - t];
  transform_kernels(g.c_in, g.c_out, [&](int64_t i, int64_t o) { return rotated.data() + (i * g.c_out + o) * 9; },
                    U.data());
  correlate(p, gy, U.data(), nullptr, gx);
}

void conv_backward_weights(const ConvGeometry& g, const float* x, const float* gy, float* gw) {
  const Plan p(g.batch, g.c_in, g.c_out, g.in[0], g.in[1], g.pad[0], g.pad[1]);
  const int64_t K = p.K, C = p.C, groups = std::min(kWeightGroups, p.chunks());
  const int64_t per_group = ceil_div(p.chunks(), groups);
  Scratch<float> partial(groups * 16 * K * C);
#pragma omp parallel if (groups > 1 && !omp_in_parallel())
  {
    ChunkScratch s(p, C, K);
#pragma omp for schedule(dynamic, 1)
    for (int64_t grp = 0; grp < groups; ++grp) {
      float* S = partial.data() + grp * 16 * K * C;
      std::fill(S, S + 16 * K * C, 0.0f);
      for (int64_t i = grp * per_group; i < std::min(p.chunks(), (grp + 1) * per_group); ++i) {
        int64_t n, r0, r1;
        p.chunk(i, n, r0, r1);
        const int64_t Tc = (r1 - r0) * p.TW;
        transform_input(p, x + n * C * p.H * p.W, r0, r1, s.planes_in.data(), s.rows.data());
        transform_output_grad(p, gy + n * K * p.OH * p.OW, r0, r1, s.planes_out.data(), s.rows.data());
        // S[xi] += Y[xi] (K x Tc) V[xi]ᵀ (Tc x C)
        for (int xi = 0; xi < 16; ++xi)
          gemm(false, true, K, C, Tc, 1.0f, s.planes_out.data() + xi * K * Tc, Tc, s.planes_in.data() + xi * C * Tc,
               Tc, 1.0f, S + xi * K * C, C);
      }
    }
  }
  // The groups' sums in group order, then gw += Gᵀ S G per kernel.
  for (int64_t grp = 1; grp < groups; ++grp)
    for (int64_t e = 0; e < 16 * K * C; ++e) partial.data()[e] += partial.data()[grp * 16 * K * C + e];
  const float* S = partial.data();
#pragma omp parallel for if (K * C > 4096 && !omp_in_parallel()) schedule(static)
  for (int64_t o = 0; o < K; ++o)
    for (int64_t i = 0; i < C; ++i) {
      double s[4][4], t[3][4];
      for (int xi = 0; xi < 16; ++xi) s[xi / 4][xi % 4] = S[(xi * K + o) * C + i];
      for (int a = 0; a < 3; ++a)  // Gᵀ S
        for (int c = 0; c < 4; ++c) t[a][c] = kG[0][a] * s[0][c] + kG[1][a] * s[1][c] + kG[2][a] * s[2][c] + kG[3][a] * s[3][c];
      float* gk = gw + (o * C + i) * 9;
      for (int a = 0; a < 3; ++a)  // (Gᵀ S) G
        for (int b = 0; b < 3; ++b)
          gk[3 * a + b] += static_cast<float>(t[a][0] * kG[0][b] + t[a][1] * kG[1][b] + t[a][2] * kG[2][b] + t[a][3] * kG[3][b]);
    }
}

}  // namespace shardrt::kernels::cpu::winograd
