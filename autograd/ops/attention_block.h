// One block of scaled dot-product attention on Tensors, and the log-sum-exp merge of block results: the pieces
// the sharded attention patches (patches/attention.cpp) compute per K/V block, shared with them the way
// relative_l2.h is shared with patches/loss.cpp, so a patch reaches the kernels only through here. Not recorded
// on the tape: the patches record their own node. (cpu, cuda): the CUDA kernels of kernels/cuda/attention.h.
#pragma once
#include <cstdint>

#include "runtime/tensor.h"

namespace shardrt::ops_detail {

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
AttentionBlock attention_block(const char* op, const Tensor& q, const Tensor& kv, int64_t nk, int64_t dv,
                               double scale, HeadRange heads = {});

struct AttentionBlockGrads {
  Tensor q;   // (nh, Nq, D)
  Tensor kv;  // packed like a block of the range's nh heads: dK (nh, nk, D) then dV (nh, nk, Dv)
};

// Grads of the heads in `heads` of one block. out, lse, grad_out and grad_lse are contiguous, over all BH heads
// and all keys (the GLOBAL result and its grads): fed those, each block's probabilities exp(s - lse) are the
// global ones, so the block's dq, dK and dV are exact and sum over blocks to the full grads.
AttentionBlockGrads attention_block_backward(const char* op, const Tensor& q, const Tensor& kv, int64_t nk,
                                             double scale, const Tensor& out, const Tensor& lse,
                                             const Tensor& grad_out, const Tensor& grad_lse, HeadRange heads = {});

// Folds a block's result into a running one over earlier blocks (acc (nh, Nq, Dv) and lse (nh, Nq), contiguous,
// updated in place; start from 0 and -inf), as if both had been computed over the union of their keys.
void merge_attention_block(const char* op, const Tensor& acc, const Tensor& lse, const AttentionBlock& block);

}  // namespace shardrt::ops_detail
