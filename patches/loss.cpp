// Sharded losses over sharded data: mse_loss = mean((p - t)^2), relative_l2_loss = ||p - t|| / ||t||,
// cross_entropy = -(1/N) sum_i log_softmax(logits)[i, target_i].
//
// Accepted placements: pred and target on the same mesh with the same placements and global shape, any
//   Shard/Replicate placements. A target whose extents differ from pred's (a caller decomposition) is first
//   redistributed to pred's (patches/align.h: one all_to_all_v per such axis, scope "redistribute", and its
//   reverse in backward, "redistribute.backward"), or, under the strict policy, is a MissingShardPatch naming
//   both placements and extents. Partial or other differing specs -> MissingShardPatch.
//   cross_entropy: logits (N, C) and i64 targets (N) on the same mesh; per axis either both Replicate, or logits
//   Shard(0) and targets Shard(0) with the same extents. A sharded class dim, Partial, or targets placed otherwise
//   -> MissingShardPatch. The local op's argument checks (dtypes, shapes) run first on stand-ins of the global
//   tensors; targets outside [0, C) are counted in the forward all-reduce and are then the same ValueError on
//   every rank (naming how many, not where: no rank knows the others' targets).
// Output: a 0-d scalar, Replicate on every axis (the same value on every rank).
// Forward collectives: the loss is a function of global sums; each rank sums its shard, then one all_reduce (sum)
//   per axis where the inputs are Shard, in axis order, under "<op>.forward":
//     mse_loss:         sum (p - t)^2                 1 element,  itemsize * (P-1) bytes
//     relative_l2_loss: sum (p - t)^2 and sum t^2     2 elements, 2 * itemsize * (P-1) bytes (packed, one call)
//     cross_entropy:    sum of the picked log-probabilities and the count of bad targets
//                                                     2 elements, 2 * itemsize * (P-1) bytes (packed, one call)
//   mse_loss and cross_entropy divide by the GLOBAL count (elements; rows N), so uneven and zero-size shards are
//   exact.
// Backward collectives: none. The grad of the replicated scalar is the same on every rank, and the grad of each
//   local element needs only it, the element, and the global sums saved in forward.
// Saved for backward per rank: p - t, O(N/P); relative_l2_loss also t, O(N/P), when t requires grad, and scalars;
//   cross_entropy: the local log-probabilities, O(N/P * C), and the local targets.
#include "autograd/function.h"
#include "autograd/ops/common.h"
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

// ---- cross_entropy ----------------------------------------------------------------------------------------------

bool rows_sharded_alike(const ShardTensor& logits, const ShardTensor& targets) {
  if (!same_mesh(logits.mesh(), targets.mesh()) || logits.spec().any_partial() || targets.spec().any_partial())
    return false;
  for (int m = 0; m < logits.mesh().ndim(); ++m) {
    const Placement& pl = logits.spec().placement(m);
    const Placement& pt = targets.spec().placement(m);
    if (pl.is_replicate() && pt.is_replicate()) continue;
    if (pl != Placement::Shard(0) || pt != Placement::Shard(0) || logits.spec().extents(m) != targets.spec().extents(m))
      return false;
  }
  return true;
}

// The local op's argument checks (autograd/ops/loss.cpp), with its messages, on stand-ins of the global tensors.
void check_cross_entropy_args(const ShardTensor& logits, const ShardTensor& targets) {
  const Tensor l = patch::global_stand_in(logits), t = patch::global_stand_in(targets);
  ops_detail::check_float("cross_entropy", l, "logits");
  SHARDRT_CHECK(t.dtype() == DType::i64, DTypeError, "cross_entropy: targets must be i64, got ", t.str());
  check_same_device("cross_entropy", l, t);
  SHARDRT_CHECK(l.dim() == 2 && t.dim() == 1 && t.size(0) == l.size(0), ShapeError,
                "cross_entropy: expected logits (N, C) and targets (N), got ", l.str(), " and ", t.str());
}

struct ShardedCrossEntropyCtx {
  Tensor log_probs;  // local (n, C)
  Tensor one_hot;    // local (n, C), u8
  double rows = 0;   // the GLOBAL N
};

// (n, C) u8 with 1 where c == target_i (compared in f64: exact for any class count); targets outside [0, C)
// match no class.
Tensor one_hot_mask(const Tensor& targets, int64_t C) {
  const Tensor classes = arange(0.0, static_cast<double>(C), 1.0, {DType::f64, targets.device()});
  return eq(to_dtype(targets, DType::f64).view({targets.numel(), 1}), classes.view({1, C}));
}

int64_t count_outside(const Tensor& targets, int64_t C) {
  const Tensor host = targets.to(Device::cpu()).contiguous();
  const int64_t* t = host.data<int64_t>();
  int64_t bad = 0;
  for (int64_t i = 0; i < host.numel(); ++i) bad += t[i] < 0 || t[i] >= C;
  return bad;
}

Tensor sharded_cross_entropy_forward(ShardedCrossEntropyCtx& ctx, const ShardTensor& logits,
                                     const ShardTensor& targets) {
  const int64_t C = logits.global_shape()[1];
  ctx.rows = static_cast<double>(logits.global_shape()[0]);
  NoGradGuard no_grad;
  ctx.log_probs = log_softmax(logits.local(), 1);  // the class dim is whole on every rank
  ctx.one_hot = one_hot_mask(targets.local(), C);
  const Tensor picked = sum(where(ctx.one_hot, ctx.log_probs, zeros({}, {logits.dtype(), logits.device()})));
  const Tensor bad = full({1}, static_cast<double>(count_outside(targets.local(), C)), {logits.dtype(), logits.device()});
  // This rank's share of the picked sum and its bad-target count, in one buffer: one all-reduce per axis.
  const Tensor sums = cat({reshape(picked, {1}), bad}, 0);
  patch::all_reduce_over(logits.mesh(), patch::shard_axes(logits.spec()), sums, ReduceOp::sum,
                         "cross_entropy.forward");
  const double outside = sums.to(Device::cpu()).to_vector()[1];
  SHARDRT_CHECK(outside == 0, ValueError, "cross_entropy: ", static_cast<int64_t>(outside),
                " targets are outside [0, ", C, ") for logits ", patch::global_stand_in(logits).str());
  return mul_scalar(select(sums, 0, 0), -1.0 / ctx.rows);
}

std::vector<Tensor> sharded_cross_entropy_backward(ShardedCrossEntropyCtx& ctx,
                                                   const std::vector<Tensor>& grad_outputs) {
  // dL/dlogits = (softmax(logits) - one_hot) / N, with the GLOBAL N: local rows only.
  const Tensor& g = grad_outputs[0];
  return {mul(sub(exp(ctx.log_probs), to_dtype(ctx.one_hot, g.dtype())), mul_scalar(g, 1.0 / ctx.rows))};
}

ShardTensor cross_entropy_run(const ShardTensor& logits, const ShardTensor& targets) {
  ShardedCrossEntropyCtx ctx;
  const Tensor loss = sharded_cross_entropy_forward(ctx, logits, targets);
  return ShardTensor(record("cross_entropy", {logits.local()}, loss, std::move(ctx), sharded_cross_entropy_backward),
                     replicated_scalar(logits.mesh()));
}

}  // namespace

ShardTensor cross_entropy(const ShardTensor& logits, const ShardTensor& targets) {
  static const std::vector<LossPatch> table = {{"cross_entropy/rows-sharded", rows_sharded_alike, cross_entropy_run}};
  check_cross_entropy_args(logits, targets);
  return dispatch_patch("cross_entropy", table, {&logits, &targets}, logits, targets);
}

ShardTensor mse_loss(const ShardTensor& pred, const ShardTensor& target) {
  static const std::vector<LossPatch> table = {{"mse_loss/same-layout", same_layout, mse_run}};
  return dispatch_patch("mse_loss", table, {&pred, &target}, pred, target);
}

ShardTensor relative_l2_loss(const ShardTensor& pred, const ShardTensor& target) {
  static const std::vector<LossPatch> table = {{"relative_l2_loss/same-layout", same_layout, relative_l2_run}};
  return dispatch_patch("relative_l2_loss", table, {&pred, &target}, pred, target);
}

}  // namespace shardrt
