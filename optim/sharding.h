// Where optimizer state lives on a ddp x domain mesh, and what one step communicates (every collective in
// >= f32: low-precision grads are summed with Accumulate::f32).
//
//   replicated  every rank holds everything. Grads: one all_reduce over ddp of the whole grad arena (the mean of
//               the per-rank estimates). Update on the whole arena, on every rank. Nothing is gathered.
//   ddp         ZeRO-2 layout: each ddp rank owns 1/ddp of the master weights and optimizer state (shard = ddp
//               coordinate). Grads: one reduce_scatter over ddp into the owned shard; the update runs on it; one
//               all_gather over ddp rebuilds the parameters. Ranks of one domain group own the same shard.
//   mesh        the memory floor: every rank of ddp x domain owns 1/(ddp * domain) (shard = mesh rank). Grads: the
//               reduce_scatter over ddp as in `ddp` (its segment q holds the shards of ddp group q's domain ranks,
//               contiguous because mesh rank = q * domain + domain coordinate), then each rank keeps its own
//               1/domain piece of it, a local slice (the domain sums were made once already, by the patches); one
//               all_gather over the whole mesh rebuilds the parameters.
//   zero3       the FSDP2 / ZeRO-3 layout (optim/zero3.cpp): like `ddp` each ddp rank owns 1/ddp of everything,
//               and the parameters too live only as that shard between uses: each block's parameters are
//               all-gathered (async) just before the block's forward, the next block's gather prefetched, released
//               after the forward, re-gathered before the block's backward (the one before it prefetched), and the
//               block's grads reduce-scattered (async) over ddp as soon as its backward is done. Parameters outside
//               every block (the root unit: embeddings, head) stay whole, their grads reduce-scattered in step().
//               A mode of its own rather than a flag on `ddp`: it needs the module's block structure and its hooks,
//               and `ddp` stays the plain-module ZeRO-2 that works with any model and any grads a caller writes.
// Global-norm clipping adds one all_reduce of one f64 (the squared norm) over the ranks whose shards are
// disjoint: none (replicated), ddp, or the whole mesh.
#pragma once
#include <string>

#include "mesh/mesh.h"
#include "optim/optimizer_config.h"

namespace shardrt::optim {

// ShardingMode and its names: optim/optimizer_config.h (no mesh needed to read a config).

// This rank's place in a mode: how many shards the arenas have, which one is its own, and the axes.
struct ShardPlan {
  ShardingMode mode = ShardingMode::replicated;
  int shards = 1;        // arena shards
  int own_shard = 0;     // this rank's shard
  int batch_ranks = 1;   // ranks of the batch (ddp) axis, 1 if none
  int batch_index = 0;   // this rank's coordinate on it
  int domain_ranks = 1;  // ranks of the domain axes together
  int domain_index = 0;  // this rank's index within its domain group
  std::string batch_axis;  // "" when the mesh has no batch axis
};

// A mesh is a 1-D mesh of either role, or 2-D batch x domain (the batch axis first, as Mesh(comm, ddp, domain)
// makes it); anything else is a ValueError naming the mesh.
ShardPlan plan_sharding(const Mesh& mesh, ShardingMode mode);

}  // namespace shardrt::optim
