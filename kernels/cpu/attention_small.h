// Fused attention for small head dims (FLARE's 16, GALE's 32): the contract of kernels/cpu/attention.h's
// attention_forward / attention_backward, computed tile by tile with the register-tiled products of
// attention_tiles.h instead of BLAS calls. Per query block and key block the forward keeps the score tile in L1,
// turns it into probabilities in place (scale folded into a copy of the query block, online softmax: the running
// max and sum per row, the output accumulator rescaled), and adds P V into the accumulator; the log-sum-exp is
// saved. The backward recomputes P = exp(s - lse) per tile and forms dV, dP, dS, dQ and dK from it in the same
// pass (flash-attention style), with the parallel split and summation order of the blocked kernel (tasks of
// (head, key group) fixed by the shapes), so results do not depend on the thread count. Internal to the
// attention kernel; attention.cpp picks it by head dim.
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu::attention_small {

// Whether the fused kernel runs attention of this q/k and v width (attention.cpp calls it then).
// SHARDRT_CPU_ATTENTION=blocked (read once) turns it off, for side-by-side measurements against the BLAS-tiled
// kernel.
bool takes(int64_t D, int64_t Dv);

template <typename T>
void forward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, T scale, const T* q, const T* k, const T* v,
             T* out, T* lse);

// grad_lse may be null. groups: the key groups per head of attention.cpp's split (each task owns its keys' dK/dV
// and a share of dQ; shares of groups > 0 go to partial_gq, (groups - 1) * BH * Nq * D elements, which the caller
// adds in group order).
template <typename T>
void backward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, T scale, const T* q, const T* k, const T* v,
              const T* out, const T* lse, const T* grad_out, const T* grad_lse, T* grad_q, T* grad_k, T* grad_v,
              int64_t groups, int64_t keys_per_group, T* partial_gq, bool parallel);

// Keys per tile of the fused kernel; attention.cpp's key groups are whole multiples of it.
constexpr int64_t kKeyBlock = 128;

}  // namespace shardrt::kernels::cpu::attention_small
