// Sharded losses over sharded data: mse_loss = mean((p - t)^2), relative_l2_loss = ||p - t|| / ||t||.
//
// Accepted placements: pred and target on the same mesh with the same placements and global shape, any
//   Shard/Replicate placements. A target whose extents differ from pred's (a caller decomposition) is first
//   redistributed to pred's (patches/align.h: one all_to_all_v per such axis, scope "redistribute", and its
//   reverse in backward, "redistribute.backward"), or, under the strict policy, is a MissingShardPatch naming
//   both placements and extents. Partial or other differing specs -> MissingShardPatch.
// Output: a 0-d scalar, Replicate on every axis (the same value on every rank).
// Forward collectives: the loss is a function of global sums; each rank sums its shard, then one all_reduce (sum)
//   per axis where the inputs are Shard, in axis order, under "<op>.forward":
//     mse_loss:         sum (p - t)^2                 1 element,  itemsize * (P-1) bytes
//     relative_l2_loss: sum (p - t)^2 and sum t^2     2 elements, 2 * itemsize * (P-1) bytes (packed, one call)
//   mse_loss divides by the GLOBAL element count, so uneven and zero-size shards are exact.
// Backward collectives: none. The grad of the replicated scalar is the same on every rank, and the grad of each
//   local element needs only it, the element, and the global sums saved in forward.
// Saved for backward per rank: p - t, O(N/P); relative_l2_loss also t, O(N/P), when t requires grad, and scalars.
#include "autograd/function.h"
#include "autograd/ops/relative_l2.h"
#include "patches/align.h"
#include "patches/dispatch.h"
#include "patches/ops.h"
#include "patches/patch_util.h"
#include "runtime/factories.h"

namespace shardrt {

namespace {

using LossPatch = Patch<ShardTensor(ShardTensor, ShardTensor)>;

// The same spec, but for extents that align_extents can give the target.
bool same_layout(const ShardTensor& pred, const ShardTensor& target) {
  if (pred.spec().any_partial() || !same_mesh(pred.mesh(), target.mesh()) ||
      pred.placements() != target.placements() || pred.global_shape() != target.global_shape())
    return false;
  for (int m = 0; m < pred.mesh().ndim(); ++m)
    if (!extents_alignable(pred, target, m)) return false;
  return true;
}

ShardSpec replicated_scalar(const Mesh& mesh) {
  return ShardSpec(mesh, Placements(static_cast<size_t>(mesh.ndim()), Placement::Replicate()), Shape{},
                   patch::no_extents(mesh));
}

// ---- mse_loss ------------------------------------------------------------------------------------------------

struct ShardedMseCtx {
  Tensor diff;       // local p - t
  double count = 0;  // global element count
  bool pred_needs_grad = false, target_needs_grad = false;
};

Tensor sharded_mse_forward(ShardedMseCtx& ctx, const ShardTensor& pred, const ShardTensor& target) {
  ctx.count = static_cast<double>(shape_numel(pred.global_shape()));
  ctx.pred_needs_grad = requires_grad(pred.local());
  ctx.target_needs_grad = requires_grad(target.local());
  NoGradGuard no_grad;
  ctx.diff = sub(pred.local(), target.local());
  const Tensor total = sum(mul(ctx.diff, ctx.diff));  // this rank's share
  patch::all_reduce_over(pred.mesh(), patch::shard_axes(pred.spec()), total, ReduceOp::sum, "mse_loss.forward");
  return mul_scalar(total, 1.0 / ctx.count);
}

std::vector<Tensor> sharded_mse_backward(ShardedMseCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  // dL/dp = 2 (p - t) / count = -dL/dt
  const Tensor gp = mul(ctx.diff, mul_scalar(grad_outputs[0], 2.0 / ctx.count));
  return {ctx.pred_needs_grad ? gp : Tensor(), ctx.target_needs_grad ? neg(gp) : Tensor()};
}

ShardTensor mse_run(const ShardTensor& pred, const ShardTensor& target_given) {
  const ShardTensor target = align_extents("mse_loss", pred, target_given);
  ShardedMseCtx ctx;
  const Tensor loss = sharded_mse_forward(ctx, pred, target);
  return ShardTensor(record("mse_loss", {pred.local(), target.local()}, loss, std::move(ctx), sharded_mse_backward),
                     replicated_scalar(pred.mesh()));
}

// ---- relative_l2_loss -------------------------------------------------------------------------------------------


Tensor sharded_relative_l2_forward(ops_detail::RelativeL2Ctx& ctx, const ShardTensor& pred, const ShardTensor& target) {
  ctx.pred_needs_grad = requires_grad(pred.local());
  ctx.target_needs_grad = requires_grad(target.local());
  NoGradGuard no_grad;
  ctx.diff = sub(pred.local(), target.local());
  // Both global sums of squares in one buffer, so one all-reduce per axis carries them.
  const Tensor sums =
      cat({reshape(sum(mul(ctx.diff, ctx.diff)), {1}), reshape(sum(mul(target.local(), target.local())), {1})}, 0);
  patch::all_reduce_over(pred.mesh(), patch::shard_axes(pred.spec()), sums, ReduceOp::sum, "relative_l2_loss.forward");
  const Tensor norms = sqrt(sums);
  ctx.diff_norm = select(norms, 0, 0);
  ctx.target_norm = select(norms, 0, 1);
  ctx.loss = div(ctx.diff_norm, ctx.target_norm);
  if (ctx.target_needs_grad) ctx.target = target.local().detach();
  return ctx.loss;
}


ShardTensor relative_l2_run(const ShardTensor& pred, const ShardTensor& target_given) {
  const ShardTensor target = align_extents("relative_l2_loss", pred, target_given);
  ops_detail::RelativeL2Ctx ctx;
  const Tensor loss = sharded_relative_l2_forward(ctx, pred, target);
  return ShardTensor(
      record("relative_l2_loss", {pred.local(), target.local()}, loss, std::move(ctx), ops_detail::relative_l2_backward),
      replicated_scalar(pred.mesh()));
}

}  // namespace

ShardTensor mse_loss(const ShardTensor& pred, const ShardTensor& target) {
  static const std::vector<LossPatch> table = {{"mse_loss/same-layout", same_layout, mse_run}};
  return dispatch_patch("mse_loss", table, {&pred, &target}, pred, target);
}

ShardTensor relative_l2_loss(const ShardTensor& pred, const ShardTensor& target) {
  static const std::vector<LossPatch> table = {{"relative_l2_loss/same-layout", same_layout, relative_l2_run}};
  return dispatch_patch("relative_l2_loss", table, {&pred, &target}, pred, target);
}

}  // namespace shardrt
