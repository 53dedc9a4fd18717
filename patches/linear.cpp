// Sharded linear: y = x W^T + b over the last (feature) dim of x.
//
// Accepted placements: on every mesh axis x is Replicate or Shard(d) with d not the last dim; weight and bias are
//   plain replicated Tensors. A sharded feature dim, or Partial -> MissingShardPatch.
// Output: x's placements; global shape = x's with the last dim = out_features; per-rank extents = x's (only the
//   feature dim changes, and it is never sharded).
// Forward collectives: none — every output row depends only on the same row of x.
// Backward collectives: x's grad is local. The weight and bias grads are sums over the rows of x, so on each rank
//   they are partial over the axes where x is Shard: when either requires grad, both grads are packed into one
//   buffer of >= f32 and all-reduced (sum) once per such axis, in axis order, under "linear.backward":
//   bytes = (numel(W) + numel(b)) * max(4, itemsize) * (P-1) per axis. Replicated x: nothing.
// Saved for backward per rank: the local op's — local x, O(N/P), and the weight (the parameter itself, no copy).
#include "patches/dispatch.h"
#include "patches/ops.h"
#include "patches/patch_util.h"

namespace shardrt {

namespace {

using LinearPatch = Patch<ShardTensor(ShardTensor, Tensor, Tensor)>;

bool features_unsharded(const ShardTensor& x, const Tensor&, const Tensor&) {
  return x.dim() >= 1 && !x.spec().any_partial() && x.spec().axis_sharding(x.dim() - 1) < 0;
}

ShardTensor linear_rows(const ShardTensor& x, const Tensor& weight, const Tensor& bias) {
  const std::vector<Tensor> p =
      patch::reduce_param_grads("linear", x.spec(), {weight, bias});
  const Tensor y = linear(x.local(), p[0], p[1]);
  Shape global = x.global_shape();
  global.back() = y.size(-1);
  return ShardTensor(y, x.spec().with(x.placements(), global, x.spec().all_extents()));
}

}  // namespace

ShardTensor linear(const ShardTensor& x, const Tensor& weight, const Tensor& bias) {
  static const std::vector<LinearPatch> table = {
      {"linear/rows-sharded-or-replicated", features_unsharded, linear_rows}};
  return dispatch_patch("linear", table, {&x}, x, weight, bias);
}

}  // namespace shardrt
