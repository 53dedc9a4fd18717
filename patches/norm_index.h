// Sharded normalisation with statistics over sharded dims (patches/norm_stats.cpp) and indexing along a sharded
// dim with GLOBAL indices (patches/index.cpp). See each .cpp for placements, collectives and saved bytes.
#pragma once
#include "autograd/ops.h"
#include "patches/shard_tensor.h"

namespace shardrt {

// ---- normalisation statistics over sharded dims (patches/norm_stats.cpp) ------------------------------------
// x (N, C, *spatial): Shard on the batch dim or on any spatial dims (several mesh axes at once), or Replicate.
// Group statistics over sharded spatial dims are merged across ranks exactly (two passes, >= f32, f64 for f64).
ShardTensor group_norm(const ShardTensor& x, int64_t groups, const Tensor& weight = Tensor(),
                       const Tensor& bias = Tensor(), double eps = 1e-5);
// Layer norm whose normalised (trailing) dims may be sharded: the same two-pass statistics. Leading dims may be
// sharded too. (The plain `layer_norm` overload in patches/ops.h covers only unsharded normalised dims.)
ShardTensor layer_norm_sharded_stats(const ShardTensor& x, const Shape& normalized_shape,
                                     const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                                     double eps = 1e-5);

// ---- indexing with global indices along a sharded dim (patches/index.cpp) -----------------------------------
// x sharded along `dim` by one mesh axis A (other axes may shard other dims), or not sharded along `dim` (local).
// `index`: a plain 1-D i64 tensor of GLOBAL indices in [0, x.global_shape()[dim]), identical on every rank.
// Output, dim sharded: Shard(dim) on A with the index's own split, split_extents(index.numel(), size(A)) — rank
// r holds the rows index[o_r, o_r + k_r) — fetched from their owners with one all_to_all_v (no request phase:
// every rank knows every other rank's index window). Backward routes the grad rows back to the owners (one
// all_to_all_v) and scatter-adds them.
ShardTensor index_select(const ShardTensor& x, int dim, const Tensor& index);

// Rows of x by global index, where the index itself is sharded (e.g. the neighbour lists of sharded queries).
// x sharded along `dim` by one mesh axis A (other axes may shard other dims), or not sharded along `dim` (local);
// `index` an i64 ShardTensor of any shape on the same mesh: Shard(0) or Replicate on A, and on other axes
// Replicate or Shard(0) where x is Replicate (x's grad is then all-reduced there once); values in
// [0, x.global_shape()[dim]) or < 0 (no row: zeros, no grad — the padding of radius_search). Output: x's shape
// with `dim` replaced by index's shape, sharded like the index (its dim 0 lands at `dim`). Forward: a request
// phase (all_to_all of counts, all_to_all_v of the requested global indices), then one all_to_all_v of the rows;
// backward: one all_to_all_v of grad rows back to the owners, scatter-added (the adjoint).
ShardTensor gather_global(const ShardTensor& x, int dim, const ShardTensor& index);

// The adjoint of gather_global as a forward op: out = x + (src's rows added at the global `index` rows of x).
// x and index as for gather_global (entries < 0 are dropped), except that an index sharded where x is Replicate
// has no patch (the sum would be partial there); src shaped and placed like gather_global(x, dim, index).
// Output: x's spec.
ShardTensor scatter_add_global(const ShardTensor& x, int dim, const ShardTensor& index, const ShardTensor& src);

}  // namespace shardrt
