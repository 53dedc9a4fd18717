// Sharded layer norm over the trailing `normalized_shape` dims of x.
//
// Accepted placements (first patch): on every mesh axis x is Replicate or Shard(d) with d a leading (not normalised)
//   dim; weight and bias are plain replicated Tensors (or undefined). When a normalised dim is sharded, the second
//   patch runs: layer_norm_sharded_stats (patches/norm_stats.cpp, statistics merged across ranks). Partial ->
//   MissingShardPatch.
// Output: x's spec unchanged (placements, global shape, per-rank extents).
// Forward collectives: none — the statistics of a row are all on the rank holding the row.
// Backward collectives: x's grad is local. The weight and bias grads are sums over rows, partial over the axes
//   where x is Shard: when either requires grad, both are packed into one buffer of >= f32 and all-reduced (sum)
//   once per such axis, in axis order, under "layer_norm.backward": bytes = (numel(weight) + numel(bias)) *
//   max(4, itemsize) * (P-1) per axis. Replicated x: nothing.
// Saved for backward per rank: the local op's — local x, O(N/P), per-row mean and rstd, O(N/P / D), and the weight.
#include "patches/dispatch.h"
#include "patches/norm_index.h"
#include "patches/ops.h"
#include "patches/patch_util.h"

namespace shardrt {

namespace {

using LayerNormPatch = Patch<ShardTensor(ShardTensor, Shape, Tensor, Tensor, double)>;

bool normalized_dims_unsharded(const ShardTensor& x, const Shape& normalized_shape, const Tensor&, const Tensor&,
                               double) {
  const int first = x.dim() - static_cast<int>(normalized_shape.size());
  if (first < 0 || x.spec().any_partial()) return false;
  for (int d = first; d < x.dim(); ++d)
    if (x.spec().axis_sharding(d) >= 0) return false;
  return true;
}

ShardTensor layer_norm_rows(const ShardTensor& x, const Shape& normalized_shape, const Tensor& weight,
                            const Tensor& bias, double eps) {
  const std::vector<Tensor> p =
      patch::reduce_grads_over("layer_norm", x.mesh(), patch::shard_axes(x.spec()), {weight, bias});
  return ShardTensor(layer_norm(x.local(), normalized_shape, p[0], p[1], eps), x.spec());
}

}  // namespace

ShardTensor layer_norm(const ShardTensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                       double eps) {
  static const std::vector<LayerNormPatch> table = {
      {"layer_norm/rows-sharded-or-replicated", normalized_dims_unsharded, layer_norm_rows},
      {"layer_norm/normalised-dims-sharded",
       [](const ShardTensor& x, const Shape&, const Tensor&, const Tensor&, double) { return !x.spec().any_partial(); },
       layer_norm_sharded_stats}};
  return dispatch_patch("layer_norm", table, {&x}, x, normalized_shape, weight, bias, eps);
}

}  // namespace shardrt
