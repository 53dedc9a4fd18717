#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/attention_small.h"
#include "kernels/cpu/gemm.h"

namespace shardrt::kernels::cpu {
namespace {

// Query rows per tile. Measured on a Zen 4 core (32 KiB L1d, 1 MiB L2) between 32 and 128: 64 was best or within
// noise at D = 16 and 64.
constexpr int64_t kQueryBlock = 64;
// The tile GEMMs run inside this kernel's OpenMP region, so each must stay below the size at which OpenBLAS
// threads a call (M·N·K > 65536 · GEMM_MULTITHREAD_THRESHOLD = 4): a pthread OpenBLAS called from two OpenMP
// threads at once spins in its queue lock and runs some 1000x slower.
constexpr int64_t kSerialGemmWork = int64_t(1) << 18;
constexpr int64_t kMaxKeyBlock = 256;

// Keys per tile: up to 256, which keeps the score tile (64 KiB in f32) with the K and V blocks in L2 and makes the
// GEMMs long enough that call and packing costs stop dominating at small head dims (D = 16: 256 keys), capped so
// the tile's GEMMs stay serial (D = 64: 64 keys), in multiples of 16 (a vector of f32 at AVX-512).
int64_t key_block(int64_t D, int64_t Dv) {
  const int64_t widest = std::max<int64_t>({D, Dv, 1});
  return std::clamp<int64_t>(kSerialGemmWork / (kQueryBlock * widest) / 16 * 16, 16, kMaxKeyBlock);
}
// Below this many multiply-adds an OpenMP region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 16;
// The backward wants at least this many independent tasks so that every thread has work; with fewer heads it
// splits each head's keys into groups. A constant, not the thread count, so results do not depend on it.
constexpr int64_t kBackwardTasks = 8;

}  // namespace

template <typename T>
void attention_forward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, T scale, const T* q, const T* k,
                       const T* v, T* out, T* lse) {
  // Small head dims: the fused kernel (BLAS calls per 16-wide tile cost more than their arithmetic).
  if (attention_small::takes(D, Dv)) {
    attention_small::forward(BH, Nq, Nk, D, Dv, scale, q, k, v, out, lse);
    return;
  }
  const int64_t n_qblocks = (Nq + kQueryBlock - 1) / kQueryBlock;
  const int64_t n_tasks = BH * n_qblocks;
  const int64_t keys_per_tile = key_block(D, Dv);
  const bool parallel = BH * Nq * Nk * (D + Dv) > kParallelWork;

#pragma omp parallel if (parallel)
  {
    std::vector<T> scores(kQueryBlock * keys_per_tile);
    std::vector<T> row_max(kQueryBlock), row_sum(kQueryBlock);

#pragma omp for schedule(static)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t bh = task / n_qblocks;
      const int64_t q0 = (task % n_qblocks) * kQueryBlock;
      const int64_t bq = std::min(kQueryBlock, Nq - q0);
      const T* q_blk = q + (bh * Nq + q0) * D;
      const T* k_head = k + bh * Nk * D;
      const T* v_head = v + bh * Nk * Dv;
      // The output block doubles as the unnormalised accumulator Σ_j exp(s_ij - m_i) v_j.
      T* acc = out + (bh * Nq + q0) * Dv;
      T* lse_blk = lse + bh * Nq + q0;
      std::fill(acc, acc + bq * Dv, T(0));
      if (Nk == 0) {
        std::fill(lse_blk, lse_blk + bq, -std::numeric_limits<T>::infinity());
        continue;
      }
      std::fill(row_max.begin(), row_max.end(), -std::numeric_limits<T>::infinity());
      std::fill(row_sum.begin(), row_sum.end(), T(0));

      for (int64_t k0 = 0; k0 < Nk; k0 += keys_per_tile) {
        const int64_t bk = std::min(keys_per_tile, Nk - k0);
        gemm(false, true, bq, bk, D, scale, q_blk, D, k_head + k0 * D, D, T(0), scores.data(), bk);
        attention_rows::online_softmax_block(bq, bk, scores.data(), row_max.data(), row_sum.data(), acc, Dv, Dv);
        gemm(false, false, bq, Dv, bk, T(1), scores.data(), bk, v_head + k0 * Dv, Dv, T(1), acc, Dv);
      }
      attention_rows::finish_rows(bq, Dv, acc, row_max.data(), row_sum.data(), lse_blk);
    }
  }
}

template <typename T>
void attention_backward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, T scale, const T* q, const T* k,
                        const T* v, const T* out, const T* lse, const T* grad_out, const T* grad_lse, T* grad_q,
                        T* grad_k, T* grad_v) {
  // Task (head, key group) owns dK and dV of its keys outright and sums its share of dQ over those keys; group
  // 0 writes dQ in place, the others into scratch that is added afterwards in group order, so every sum runs in
  // the same order whatever the thread count.
  const bool small = attention_small::takes(D, Dv);
  const int64_t keys_per_tile = small ? attention_small::kKeyBlock : key_block(D, Dv);
  const int64_t n_kblocks = (Nk + keys_per_tile - 1) / keys_per_tile;
  const int64_t groups =
      std::clamp<int64_t>((kBackwardTasks + BH - 1) / std::max<int64_t>(BH, 1), 1, std::max<int64_t>(n_kblocks, 1));
  const int64_t kblocks_per_group = (n_kblocks + groups - 1) / groups;
  const int64_t n_tasks = BH * groups;
  const bool parallel = n_tasks > 1 && BH * Nq * Nk * (D + Dv) > kParallelWork;
  std::vector<T> partial_gq((groups - 1) * BH * Nq * D);

  if (small) {
    attention_small::backward(BH, Nq, Nk, D, Dv, scale, q, k, v, out, lse, grad_out, grad_lse, grad_q, grad_k, grad_v,
                              groups, kblocks_per_group * keys_per_tile, partial_gq.data(), parallel);
  } else {
#pragma omp parallel if (parallel)
    {
      std::vector<T> prob(kQueryBlock * keys_per_tile);
      std::vector<T> grad_score(kQueryBlock * keys_per_tile);
      std::vector<T> row_term(kQueryBlock);

#pragma omp for schedule(static)
      for (int64_t task = 0; task < n_tasks; ++task) {
        const int64_t bh = task / groups, group = task % groups;
        const int64_t k_begin = std::min(Nk, group * kblocks_per_group * keys_per_tile);
        const int64_t k_end = std::min(Nk, (group + 1) * kblocks_per_group * keys_per_tile);
        const T* q_head = q + bh * Nq * D;
        const T* k_head = k + bh * Nk * D;
        const T* v_head = v + bh * Nk * Dv;
        const T* out_head = out + bh * Nq * Dv;
        const T* gout_head = grad_out + bh * Nq * Dv;
        const T* lse_head = lse + bh * Nq;
        T* gq_head = group == 0 ? grad_q + bh * Nq * D : partial_gq.data() + ((group - 1) * BH + bh) * Nq * D;
        T* gk_head = grad_k + bh * Nk * D;
        T* gv_head = grad_v + bh * Nk * Dv;
        std::fill(gq_head, gq_head + Nq * D, T(0));
        std::fill(gk_head + k_begin * D, gk_head + k_end * D, T(0));
        std::fill(gv_head + k_begin * Dv, gv_head + k_end * Dv, T(0));
        if (k_begin == k_end) continue;

        for (int64_t q0 = 0; q0 < Nq; q0 += kQueryBlock) {
          const int64_t bq = std::min(kQueryBlock, Nq - q0);
          const T* q_blk = q_head + q0 * D;
          const T* gout_blk = gout_head + q0 * Dv;
          T* gq_blk = gq_head + q0 * D;
          // dS_ij = P_ij (dP_ij - row_term_i) with row_term_i = Σ_c dO_ic O_ic - grad_lse_i: the first part is the
          // softmax Jacobian applied to dP, the second is d lse_i / d s_ij = P_ij.
          for (int64_t i = 0; i < bq; ++i) {
            const T* o_row = out_head + (q0 + i) * Dv;
            const T* go_row = gout_blk + i * Dv;
            double delta = 0;
            for (int64_t c = 0; c < Dv; ++c) delta += double(go_row[c]) * double(o_row[c]);
            row_term[i] = T(delta) - (grad_lse ? grad_lse[bh * Nq + q0 + i] : T(0));
          }

          for (int64_t k0 = k_begin; k0 < k_end; k0 += keys_per_tile) {
            const int64_t bk = std::min(keys_per_tile, k_end - k0);
            const T* k_blk = k_head + k0 * D;
            const T* v_blk = v_head + k0 * Dv;
            gemm(false, true, bq, bk, D, scale, q_blk, D, k_blk, D, T(0), prob.data(), bk);
            attention_rows::probabilities(bq, bk, prob.data(), lse_head + q0);
            // dV += Pᵀ dO, dP = dO Vᵀ
            gemm(true, false, bk, Dv, bq, T(1), prob.data(), bk, gout_blk, Dv, T(1), gv_head + k0 * Dv, Dv);
            gemm(false, true, bq, bk, Dv, T(1), gout_blk, Dv, v_blk, Dv, T(0), grad_score.data(), bk);
            attention_rows::softmax_grad(bq, bk, prob.data(), grad_score.data(), row_term.data());
            // dQ += scale dS K, dK += scale dSᵀ Q
            gemm(false, false, bq, D, bk, scale, grad_score.data(), bk, k_blk, D, T(1), gq_blk, D);
            gemm(true, false, bk, D, bq, scale, grad_score.data(), bk, q_blk, D, T(1), gk_head + k0 * D, D);
          }
        }
      }
    }
  }

  if (groups > 1) {
    const int64_t n = BH * Nq * D;
#pragma omp parallel for if (parallel) schedule(static)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t g = 1; g < groups; ++g) grad_q[i] += partial_gq[(g - 1) * n + i];
  }
}

template <typename T>
void attention_merge(int64_t rows, int64_t Dv, T* acc, T* lse, const T* out_b, const T* lse_b) {
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < rows; ++i) {
    const T lb = lse_b[i], mo = lse[i];
    T* a = acc + i * Dv;
    const T* o = out_b + i * Dv;
    if (lb == neg_inf) continue;
    if (mo == neg_inf) {
      std::copy(o, o + Dv, a);
      lse[i] = lb;
      continue;
    }
    // logaddexp without overflow: the larger term factored out.
    const T hi = std::max(mo, lb);
    const T merged = hi + std::log1p(std::exp(-std::abs(mo - lb)));
    const T wa = std::exp(mo - merged), wb = std::exp(lb - merged);
    for (int64_t c = 0; c < Dv; ++c) a[c] = wa * a[c] + wb * o[c];
    lse[i] = merged;
  }
}

#define SHARDRT_INSTANTIATE(T)                                                                                  \
  template void attention_forward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, T, const T*, const T*,        \
                                     const T*, T*, T*);                                                          \
  template void attention_merge<T>(int64_t, int64_t, T*, T*, const T*, const T*);                               \
  template void attention_backward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, T, const T*, const T*,       \
                                      const T*, const T*, const T*, const T*, const T*, T*, T*, T*);
SHARDRT_INSTANTIATE(float)
SHARDRT_INSTANTIATE(double)
#undef SHARDRT_INSTANTIATE

}  // namespace shardrt::kernels::cpu
