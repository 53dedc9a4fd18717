// The fused small-head attention (see attention_small.h).
#include "kernels/cpu/attention_small.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/attention_tiles.h"

namespace shardrt::kernels::cpu::attention_small {
namespace {

// Query rows per tile (with kKeyBlock = 128 keys: a 32 KiB score tile in f32). Measured on AVX2 at FLARE's shapes
// (D 16 and 32; 64 x 7225 and 7225 x 64) between 16 x 256 and 64 x 256: 64 x 128 was best or within noise, 32 x 128
// 5-10% slower, 64 x 256 40% slower (the tile leaves L2's fast part).
constexpr int64_t kQueryBlock = 64;
// Head dims up to this many elements take the fused kernel. Measured on AVX2 against the BLAS-tiled kernel (CPU
// time, forward / backward): D 16 (FLARE) 20-30% faster, D 32 10-20%. At D 64 (ViT-S) it was only 3-10% faster and
// its dQ rounded 2.5x more (f32 against fp64, N 4096: 7.4e-8 against 2.9e-8 worst), so 64 and wider keep BLAS.
constexpr int64_t kMaxHeadDim = 32;
// Below this many multiply-adds an OpenMP region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 16;

// bt (d x n, leading dim ld >= n) = the rows x (n x d, leading dim d) transposed: the layout scores() reads. In
// 16 x 16 blocks, so that reads and writes both stay within a few cache lines.
template <typename T>
void transpose(int64_t n, int64_t d, const T* x, T* bt, int64_t ld) {
  constexpr int64_t B = 16;
  for (int64_t r0 = 0; r0 < n; r0 += B)
    for (int64_t c0 = 0; c0 < d; c0 += B) {
      const int64_t r1 = std::min(n, r0 + B), c1 = std::min(d, c0 + B);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) bt[c * ld + r] = x[r * d + c];
    }
}

// dst = scale * src over n elements.
template <typename T>
void scaled_copy(int64_t n, T scale, const T* src, T* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = scale * src[i];
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* env = std::getenv("SHARDRT_CPU_ATTENTION");
    return !(env && std::string(env) == "blocked");
  }();
  return on;
}

bool takes(int64_t D, int64_t Dv) {
  return enabled() && D >= 1 && Dv >= 1 && D <= kMaxHeadDim && Dv <= kMaxHeadDim;
}

template <typename T>
void forward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, T scale, const T* q, const T* k, const T* v,
             T* out, T* lse) {
  const int64_t n_qblocks = (Nq + kQueryBlock - 1) / kQueryBlock;
  const int64_t n_tasks = BH * n_qblocks;
  const bool parallel = n_tasks > 1 && BH * Nq * Nk * (D + Dv) > kParallelWork;
  // Every head's K transposed once, for all of its query blocks (per task and key block it had cost 13% of a
  // 6-head, 4-query-block forward), block by block: key block b of head bh is D x kKeyBlock at
  // ((bh * n_kblocks + b) * D) * kKeyBlock, so a tile's rows are kKeyBlock apart (a leading dim of Nk, 4096 say,
  // put every row in the same L1 sets).
  const int64_t n_kblocks = (Nk + kKeyBlock - 1) / kKeyBlock;
  std::vector<T> kt_all(static_cast<size_t>(BH * n_kblocks * D * kKeyBlock));
#pragma omp parallel for if (parallel && BH * n_kblocks > 1) schedule(static)
  for (int64_t i = 0; i < BH * n_kblocks; ++i) {
    const int64_t bh = i / n_kblocks, k0 = (i % n_kblocks) * kKeyBlock;
    transpose(std::min(kKeyBlock, Nk - k0), D, k + (bh * Nk + k0) * D, kt_all.data() + i * D * kKeyBlock,
              kKeyBlock);
  }
#pragma omp parallel if (parallel)
  {
    std::vector<T> qs(kQueryBlock * D), scores(kQueryBlock * kKeyBlock);
    std::vector<T> row_max(kQueryBlock), row_sum(kQueryBlock);
#pragma omp for schedule(static)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t bh = task / n_qblocks, q0 = (task % n_qblocks) * kQueryBlock;
      const int64_t bq = std::min(kQueryBlock, Nq - q0);
      const T* kt_head = kt_all.data() + bh * n_kblocks * D * kKeyBlock;
      const T* v_head = v + bh * Nk * Dv;
      // The output block doubles as the unnormalised accumulator of exp(s - m) v.
      T* acc = out + (bh * Nq + q0) * Dv;
      T* lse_blk = lse + bh * Nq + q0;
      std::fill(acc, acc + bq * Dv, T(0));
      if (Nk == 0) {
        std::fill(lse_blk, lse_blk + bq, -std::numeric_limits<T>::infinity());
        continue;
      }
      scaled_copy(bq * D, scale, q + (bh * Nq + q0) * D, qs.data());
      std::fill(row_max.begin(), row_max.end(), -std::numeric_limits<T>::infinity());
      std::fill(row_sum.begin(), row_sum.end(), T(0));
      for (int64_t k0 = 0; k0 < Nk; k0 += kKeyBlock) {
        const int64_t bk = std::min(kKeyBlock, Nk - k0);
        attention_tiles::scores(bq, bk, D, qs.data(), D, kt_head + (k0 / kKeyBlock) * D * kKeyBlock, kKeyBlock,
                                scores.data(), bk);
        attention_rows::online_softmax_block(bq, bk, scores.data(), row_max.data(), row_sum.data(), acc, Dv, Dv);
        attention_tiles::combine_rows(bq, bk, Dv, scores.data(), bk, v_head + k0 * Dv, Dv, acc, Dv);
      }
      attention_rows::finish_rows(bq, Dv, acc, row_max.data(), row_sum.data(), lse_blk);
    }
  }
}

namespace {

// One backward task: head bh, keys [k_begin, k_end). gq_head (Nq x D) receives this task's share of dQ; gk_head and
// gv_head the dK, dV rows of its keys. Key blocks outside, query blocks inside: dQ rows still sum the key blocks in
// key order and dK / dV rows the query blocks in query order, and each key block is transposed once.
template <typename T>
void backward_task(int64_t Nq, int64_t D, int64_t Dv, T scale, const T* q_head, const T* k_head, const T* v_head,
                   const T* out_head, const T* lse_head, const T* gout_head, const T* glse_head, T* gq_head,
                   T* gk_head, T* gv_head, int64_t k_begin, int64_t k_end, std::vector<T>& qs, std::vector<T>& term,
                   std::vector<T>& kt, std::vector<T>& vt, std::vector<T>& prob, std::vector<T>& grad_score) {
  std::fill(gq_head, gq_head + Nq * D, T(0));
  std::fill(gk_head + k_begin * D, gk_head + k_end * D, T(0));
  std::fill(gv_head + k_begin * Dv, gv_head + k_end * Dv, T(0));
  if (k_begin == k_end) return;
  scaled_copy(Nq * D, scale, q_head, qs.data());
  // dS = P (dP - term) with term_i = sum_c dO_ic O_ic - dlse_i: the softmax Jacobian and d lse_i / d s_ij = P_ij.
  for (int64_t i = 0; i < Nq; ++i) {
    double delta = 0;
    for (int64_t c = 0; c < Dv; ++c) delta += double(gout_head[i * Dv + c]) * double(out_head[i * Dv + c]);
    term[i] = T(delta) - (glse_head ? glse_head[i] : T(0));
  }
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kKeyBlock) {
    const int64_t bk = std::min(kKeyBlock, k_end - k0);
    transpose(bk, D, k_head + k0 * D, kt.data(), bk);
    transpose(bk, Dv, v_head + k0 * Dv, vt.data(), bk);
    for (int64_t q0 = 0; q0 < Nq; q0 += kQueryBlock) {
      const int64_t bq = std::min(kQueryBlock, Nq - q0);
      const T* qs_blk = qs.data() + q0 * D;
      const T* gout_blk = gout_head + q0 * Dv;
      attention_tiles::scores(bq, bk, D, qs_blk, D, kt.data(), bk, prob.data(), bk);
      attention_rows::probabilities(bq, bk, prob.data(), lse_head + q0);
      attention_tiles::combine_cols(bq, bk, Dv, prob.data(), bk, gout_blk, Dv, gv_head + k0 * Dv, Dv);  // dV += Pᵀ dO
      attention_tiles::scores(bq, bk, Dv, gout_blk, Dv, vt.data(), bk, grad_score.data(), bk);          // dP = dO Vᵀ
      attention_rows::softmax_grad(bq, bk, prob.data(), grad_score.data(), term.data() + q0);
      // dQ += dS K (scaled once at the end of the task), dK += dSᵀ (scale Q)
      attention_tiles::combine_rows(bq, bk, D, grad_score.data(), bk, k_head + k0 * D, D, gq_head + q0 * D, D);
      attention_tiles::combine_cols(bq, bk, D, grad_score.data(), bk, qs_blk, D, gk_head + k0 * D, D);
    }
  }
  for (int64_t i = 0; i < Nq * D; ++i) gq_head[i] *= scale;
}

}  // namespace

template <typename T>
void backward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, T scale, const T* q, const T* k, const T* v,
              const T* out, const T* lse, const T* grad_out, const T* grad_lse, T* grad_q, T* grad_k, T* grad_v,
              int64_t groups, int64_t keys_per_group, T* partial_gq, bool parallel) {
  const int64_t n_tasks = BH * groups;
#pragma omp parallel if (parallel)
  {
    std::vector<T> qs(Nq * D), term(Nq), kt(D * kKeyBlock), vt(Dv * kKeyBlock);
    std::vector<T> prob(kQueryBlock * kKeyBlock), grad_score(kQueryBlock * kKeyBlock);
#pragma omp for schedule(static)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t bh = task / groups, group = task % groups;
      const int64_t k_begin = std::min(Nk, group * keys_per_group), k_end = std::min(Nk, (group + 1) * keys_per_group);
      T* gq_head = group == 0 ? grad_q + bh * Nq * D : partial_gq + ((group - 1) * BH + bh) * Nq * D;
      backward_task(Nq, D, Dv, scale, q + bh * Nq * D, k + bh * Nk * D, v + bh * Nk * Dv, out + bh * Nq * Dv,
                    lse + bh * Nq, grad_out + bh * Nq * Dv, grad_lse ? grad_lse + bh * Nq : nullptr, gq_head,
                    grad_k + bh * Nk * D, grad_v + bh * Nk * Dv, k_begin, k_end, qs, term, kt, vt, prob, grad_score);
    }
  }
}

#define SHARDRT_INSTANTIATE(T)                                                                                 \
  template void forward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, T, const T*, const T*, const T*, T*, T*); \
  template void backward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, T, const T*, const T*, const T*, const T*, \
                            const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, T*, bool);
SHARDRT_INSTANTIATE(float)
SHARDRT_INSTANTIATE(double)
#undef SHARDRT_INSTANTIATE

}  // namespace shardrt::kernels::cpu::attention_small
