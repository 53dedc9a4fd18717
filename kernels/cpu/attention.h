// Scaled dot-product attention on raw buffers, computed block by block with an online softmax so the
// Nq × Nk score matrix is never stored (memory is O(block²) per thread, not O(Nq·Nk)).
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu {

// BH independent problems (batch × heads), each
//   out_i = Σ_j softmax_j(scale · q_i·k_j) · v_j,   lse_i = log Σ_j exp(scale · q_i·k_j)
// q (BH, Nq, D), k (BH, Nk, D), v (BH, Nk, Dv) -> out (BH, Nq, Dv), lse (BH, Nq).
// lse is what the backward needs to recompute the probabilities, and lets a caller merge partial results over
// disjoint key sets (ring attention). Nk == 0 gives out = 0 and lse = -inf.
template <typename T>
void attention_forward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, T scale, const T* q, const T* k,
                       const T* v, T* out, T* lse);

// Gradients of a loss L(out, lse) through attention_forward, given grad_out = dL/dout (BH, Nq, Dv) and
// grad_lse = dL/dlse (BH, Nq), or nullptr when lse does not feed the loss. out and lse are the forward's outputs.
// Overwrites grad_q (BH, Nq, D), grad_k (BH, Nk, D) and grad_v (BH, Nk, Dv). Parallel over heads and, when there
// are fewer than 8 heads, over groups of each head's keys: a group owns its keys' dK/dV and sums its share of dQ,
// and the shares are added in group order at the end. The grouping follows from the shapes alone, so results do
// not depend on the thread count; the shares cost (groups - 1)·BH·Nq·D scratch elements (groups ≤ 8/BH).
template <typename T>
void attention_backward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, T scale, const T* q, const T* k,
                        const T* v, const T* out, const T* lse, const T* grad_out, const T* grad_lse, T* grad_q,
                        T* grad_k, T* grad_v);

// Folds one key block's result (out_b, lse_b), rows x Dv and rows, into a running result (acc, lse) over the
// blocks before it, as if both had been computed over the union of their keys. Per row:
// lse' = logaddexp(lse, lse_b), acc' = acc·exp(lse - lse') + out_b·exp(lse_b - lse'). A block with no keys
// (lse_b = -inf) leaves the row as it is; onto an empty running row (lse = -inf) the block is copied. Start
// from acc = 0, lse = -inf.
template <typename T>
void attention_merge(int64_t rows, int64_t Dv, T* acc, T* lse, const T* out_b, const T* lse_b);

}  // namespace shardrt::kernels::cpu
