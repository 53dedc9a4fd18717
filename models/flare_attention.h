// PhysicsNeMo's FLARE attention (physicsnemo/nn/module/flare_attention.py, Fast Low-rank Attention Routing Engine):
// tokens talk to each other only through S learned global queries per head.
//   Xm = in_project_x(x) viewed (B, H, N, D); K = self_k(Xm), V = self_v(Xm) (one D -> D Linear shared by the heads)
//   pass 1 (encode): Z = softmax_N(G Kᵀ) V      G = q_global (1, H, S, D) broadcast over B; scale 1.0
//   pass 2 (decode): Y = softmax_S(K Gᵀ) Z      the queries are K; scale 1.0
//   out = out_linear(Y as (B, N, H*D))
//
// Domain parallelism, with the points sharded over a domain axis: everything is local per point except the two
// attentions. G is a replicated parameter, so pass 1 is the attention patch's (R, S) path — the softmax over the
// sharded N merges the ranks' partial results (2 all-reduces forward) and all-reduces dG once in backward — and
// pass 2 its (S, R) path: local forward, one packed all-reduce of dG|dZ in backward. q_global's grad is the sum
// of those two already complete parts, so it is never reduced again; the Linears' weight grads are summed over
// the domain once each by the linear patch. Z and the pass-1 LSE (B, H, S) are replicated: O(S), not O(N).
#pragma once
#include <cstdint>
#include <memory>

#include "models/layers.h"

namespace shardrt::models {

class FlareAttention : public Module {
 public:
  FlareAttention(int64_t dim, int64_t heads, int64_t dim_head, int64_t n_global_queries, DType dtype);
  // x (B, N, dim) -> (B, N, dim).
  ShardTensor forward(const ShardTensor& x) const;
  // trunc-normal(0.02) Linears with zero biases, q_global ~ N(0, 1): Transolver.initialize_weights leaves the bare
  // parameter at its torch.randn init.
  void init(Generator& gen);

  int64_t heads, dim_head, n_global_queries;
  Tensor q_global;  // (1, H, S, D)
  Linear in_project_x, self_k, self_v, out_linear;
};

// q_global as a ShardTensor laid out for attention against `k` (B, H, N, D): broadcast over this rank's samples
// placed like k on the axes that shard its batch and replicated on the others (the sequence axis). No collective
// forward or backward; q_global's grad gets the batch-axis share of a parameter (patches/ops.h).
ShardTensor global_queries_like(const Tensor& q_global, const ShardTensor& k);

}  // namespace shardrt::models
