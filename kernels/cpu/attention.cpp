#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace shardrt::kernels::cpu {
namespace {

// A 64 × 64 tile of scores (plus its gradient in the backward) stays in L2 while it is reused.
constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 64;
// Below this many multiply-adds an OpenMP region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 16;

}  // namespace

template <typename T>
void attention_forward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, T scale, const T* q, const T* k,
                       const T* v, T* out, T* lse) {
  const int64_t n_qblocks = (Nq + kQueryBlock - 1) / kQueryBlock;
  const int64_t n_tasks = BH * n_qblocks;
  const bool parallel = BH * Nq * Nk * (D + Dv) > kParallelWork;

#pragma omp parallel if (parallel)
  {
    std::vector<T> prob(kQueryBlock * kKeyBlock);
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
      std::fill(acc, acc + bq * Dv, T(0));
      std::fill(row_max.begin(), row_max.end(), -std::numeric_limits<T>::infinity());
      std::fill(row_sum.begin(), row_sum.end(), T(0));

      for (int64_t k0 = 0; k0 < Nk; k0 += kKeyBlock) {
        const int64_t bk = std::min(kKeyBlock, Nk - k0);
        gemm(false, true, bq, bk, D, scale, q_blk, D, k_head + k0 * D, D, T(0), prob.data(), bk);
        for (int64_t i = 0; i < bq; ++i) {
          T* p = prob.data() + i * bk;
          const T new_max = std::max(row_max[i], *std::max_element(p, p + bk));
          // exp(old - new) rescales what was accumulated under the previous running max; it is 0 on the
          // first block (old max = -inf).
          const T correction = std::exp(row_max[i] - new_max);
          T block_sum = 0;
          for (int64_t j = 0; j < bk; ++j) {
            p[j] = std::exp(p[j] - new_max);
            block_sum += p[j];
          }
          row_sum[i] = row_sum[i] * correction + block_sum;
          row_max[i] = new_max;
          if (correction != T(1)) {
            T* acc_row = acc + i * Dv;
            for (int64_t c = 0; c < Dv; ++c) acc_row[c] *= correction;
          }
        }
        gemm(false, false, bq, Dv, bk, T(1), prob.data(), bk, v_head + k0 * Dv, Dv, T(1), acc, Dv);
      }

      T* lse_blk = lse + bh * Nq + q0;
      for (int64_t i = 0; i < bq; ++i) {
        if (Nk == 0) {
          lse_blk[i] = -std::numeric_limits<T>::infinity();
          continue;
        }
        const T inv_sum = T(1) / row_sum[i];
        T* acc_row = acc + i * Dv;
        for (int64_t c = 0; c < Dv; ++c) acc_row[c] *= inv_sum;
        lse_blk[i] = row_max[i] + std::log(row_sum[i]);
      }
    }
  }
}

template <typename T>
void attention_backward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, T scale, const T* q, const T* k,
                        const T* v, const T* out, const T* lse, const T* grad_out, const T* grad_lse, T* grad_q,
                        T* grad_k, T* grad_v) {
  const bool parallel = BH > 1 && BH * Nq * Nk * (D + Dv) > kParallelWork;

#pragma omp parallel if (parallel)
  {
    std::vector<T> prob(kQueryBlock * kKeyBlock);
    std::vector<T> grad_score(kQueryBlock * kKeyBlock);
    std::vector<T> row_term(kQueryBlock);

#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < BH; ++bh) {
      const T* q_head = q + bh * Nq * D;
      const T* k_head = k + bh * Nk * D;
      const T* v_head = v + bh * Nk * Dv;
      const T* out_head = out + bh * Nq * Dv;
      const T* gout_head = grad_out + bh * Nq * Dv;
      const T* lse_head = lse + bh * Nq;
      T* gq_head = grad_q + bh * Nq * D;
      T* gk_head = grad_k + bh * Nk * D;
      T* gv_head = grad_v + bh * Nk * Dv;
      std::fill(gq_head, gq_head + Nq * D, T(0));
      std::fill(gk_head, gk_head + Nk * D, T(0));
      std::fill(gv_head, gv_head + Nk * Dv, T(0));

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

        for (int64_t k0 = 0; k0 < Nk; k0 += kKeyBlock) {
          const int64_t bk = std::min(kKeyBlock, Nk - k0);
          const T* k_blk = k_head + k0 * D;
          const T* v_blk = v_head + k0 * Dv;
          gemm(false, true, bq, bk, D, scale, q_blk, D, k_blk, D, T(0), prob.data(), bk);
          for (int64_t i = 0; i < bq; ++i) {
            const T row_lse = lse_head[q0 + i];
            T* p = prob.data() + i * bk;
            for (int64_t j = 0; j < bk; ++j) p[j] = std::exp(p[j] - row_lse);
          }
          // dV += Pᵀ dO, dP = dO Vᵀ
          gemm(true, false, bk, Dv, bq, T(1), prob.data(), bk, gout_blk, Dv, T(1), gv_head + k0 * Dv, Dv);
          gemm(false, true, bq, bk, Dv, T(1), gout_blk, Dv, v_blk, Dv, T(0), grad_score.data(), bk);
          for (int64_t i = 0; i < bq; ++i) {
            const T* p = prob.data() + i * bk;
            T* ds = grad_score.data() + i * bk;
            for (int64_t j = 0; j < bk; ++j) ds[j] = p[j] * (ds[j] - row_term[i]);
          }
          // dQ += scale dS K, dK += scale dSᵀ Q
          gemm(false, false, bq, D, bk, scale, grad_score.data(), bk, k_blk, D, T(1), gq_blk, D);
          gemm(true, false, bk, D, bq, scale, grad_score.data(), bk, q_blk, D, T(1), gk_head + k0 * D, D);
        }
      }
    }
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
