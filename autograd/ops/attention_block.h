// One block of scaled dot-product attention on Tensors, and the log-sum-exp merge of block results: the pieces
// the sharded attention patches (patches/attention.cpp) compute per K/V block, shared with them the way
// relative_l2.h is shared with patches/loss.cpp, so a patch reaches the kernels only through here. Not recorded
// on the tape: the patches record their own node. (cpu, cuda): the CUDA kernels of kernels/cuda/attention.h.
#pragma once
#include <cstdint>
#include <optional>
#include <type_traits>

#include "autograd/ops/common.h"
#include "runtime/half.h"
#include "runtime/tensor.h"

namespace shardrt::ops_detail {

// Calls f(T{}) for the attention kernels' element type of t: float / double, or bf16 / f16 for autocast's 16-bit
// CUDA operands. The CPU kernels exist for float and double only (kCpuAttention), and autocast's CPU operands are
// f32, so the 16-bit tags reach only the CUDA branch.
template <typename F>
void dispatch_attention(const char* op, const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::bf16: f(bf16{}); break;
    case DType::f16: f(f16{}); break;
    default: dispatch_float(op, t, f);
  }
}
template <typename T>
constexpr bool kCpuAttention = std::is_same_v<T, float> || std::is_same_v<T, double>;
// t's elements as the T that dispatch_attention chose for it (Tensor::data knows f32 and f64 only).
template <typename T>
T* attention_data(const Tensor& t) {
  if constexpr (kCpuAttention<T>) return t.data<T>();
  else return static_cast<T*>(t.raw_data());
}

// K and V of one block of nk keys packed back to back in one flat contiguous buffer, so they travel as one
// message: K (BH, nk, D) then V (BH, nk, Dv).
int64_t packed_kv_numel(int64_t bh, int64_t nk, int64_t d, int64_t dv);

// Heads [first, first + count) of the BH = batch x heads independent problems; count < 0 means through the last.
struct HeadRange {
  int64_t first = 0, count = -1;
};

struct AttentionBlock {
  Tensor out;  // (nh, Nq, Dv), nh the heads of the range
  Tensor lse;  // (nh, Nq): log-sum-exp of the scaled scores of each query row over the block's keys
};

// softmax(scale q kᵀ) v over the block's keys for the heads in `heads`. q is (…, Nq, D) contiguous, its leading
// dims flattened into BH; kv is a packed block of nk keys with value width dv. `op` names the caller in errors.
// `compute` (autocast's bf16/f16, as the caller's forward chose it with autocast_compute): q and kv are rounded
// to it here, as scaled_dot_product_attention rounds them, so blocks of rounded values fold to the serial
// autocast result; out and lse stay f32. Rounding is idempotent, so the caller keeps and sends its f32 tensors.
AttentionBlock attention_block(const char* op, const Tensor& q, const Tensor& kv, int64_t nk, int64_t dv,
                               double scale, HeadRange heads = {}, std::optional<DType> compute = std::nullopt);

struct AttentionBlockGrads {
  Tensor q;   // (nh, Nq, D)
  Tensor kv;  // packed like a block of the range's nh heads: dK (nh, nk, D) then dV (nh, nk, Dv)
};

// Grads of the heads in `heads` of one block. out, lse, grad_out and grad_lse are contiguous, over all BH heads
// and all keys (the GLOBAL result and its grads): fed those, each block's probabilities exp(s - lse) are the
// global ones, so the block's dq, dK and dV are exact and sum over blocks to the full grads.
// With `compute` (the forward's): q, kv and grad_out rounded as scaled_dot_product_attention's backward rounds
// them; the grads are f32.
AttentionBlockGrads attention_block_backward(const char* op, const Tensor& q, const Tensor& kv, int64_t nk,
                                             double scale, const Tensor& out, const Tensor& lse,
                                             const Tensor& grad_out, const Tensor& grad_lse, HeadRange heads = {},
                                             std::optional<DType> compute = std::nullopt);

// Folds a block's result into a running one over earlier blocks (acc (nh, Nq, Dv) and lse (nh, Nq), contiguous,
// updated in place; start from 0 and -inf), as if both had been computed over the union of their keys.
void merge_attention_block(const char* op, const Tensor& acc, const Tensor& lse, const AttentionBlock& block);

}  // namespace shardrt::ops_detail
