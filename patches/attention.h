// Sharded scaled dot-product attention over the sequence dim of q (…, Nq, D), k (…, Nk, D), v (…, Nk, Dv) on a
// 1-D mesh. Nq and Nk are independent (cross-attention works); the output follows q. Placements, collectives and
// saved bytes per patch are listed at the top of patches/attention.cpp.
#pragma once
#include "patches/shard_tensor.h"

namespace shardrt {

// How a (q Shard, kv Shard) call sees the remote K/V blocks.
enum class KvStrategy {
  ring,        // P steps, the next K/V block in flight while the current one computes; O(N/P) memory per rank
  all_gather,  // all_gather_v K/V, one local attention; O(N) K/V per rank during the op, fewer messages
};

struct AttentionShardOutput {
  ShardTensor out;  // (…, Nq, Dv), q's placements and extents
  ShardTensor lse;  // (…, Nq): log-sum-exp of the scaled scores of each query row over ALL keys; q's placements
};

// softmax(scale · q kᵀ) v with its log-sum-exp, both differentiable. k and v must share placements and extents.
// Unsupported placements (Partial, sharding any dim but the sequence dim, a mesh of more than one axis with a
// Shard placement, k/v placed differently) → MissingShardPatch naming the placements. `strategy` only matters
// when q and k/v are all sharded.
AttentionShardOutput scaled_dot_product_attention(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v,
                                                  double scale, KvStrategy strategy = KvStrategy::ring);

}  // namespace shardrt
