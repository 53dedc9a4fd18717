// Sharded softmax and log_softmax over one dim.
//
// Accepted placements: any Shard/Replicate placements; Partial -> MissingShardPatch (the softmax of a pending
//   sum is not a sum of softmaxes).
//   dim not sharded: the local op on the local tensor, no collective.
//   dim sharded by axis A: the distributed max and sum below.
// Arguments: checked first on x's global shape, as the local op checks them (f32/f64, dim in range), with the
//   op's own name ("softmax", "log_softmax"), the same error on every rank.
// Output: x's spec unchanged (placements, global shape, per-rank extents).
// Forward collectives (dim sharded by A): on A, under "<op>.forward", one all_reduce (max) of the local row maxima,
//   then one all_reduce (sum) of the local row sums of exp(x - max); each numel(rows) * itemsize * (P-1) bytes,
//   rows = this rank's local numel / its local extent of dim (the row count does not depend on A's split).
// Backward collectives (dim sharded by A): on A, under "<op>.backward", one all_reduce (sum) of the local row sums
//   of g*y (softmax) or g (log_softmax), numel(rows) * itemsize * (P-1) bytes.
// Saved for backward per rank: y, O(N/P) — both backwards need only the output.
#include "autograd/function.h"
#include "autograd/ops/common.h"
#include "patches/dispatch.h"
#include "patches/ops.h"
#include "patches/patch_util.h"

namespace shardrt {

namespace {

using SoftmaxPatch = Patch<ShardTensor(ShardTensor, int)>;

struct ShardedSoftmaxCtx {
  Mesh mesh;
  int axis = -1;  // the mesh axis sharding dim
  int dim = 0;
  bool is_log = false;
  std::string op;
  Tensor y;
};

Tensor sharded_softmax_forward(ShardedSoftmaxCtx& ctx, const Tensor& x_in) {
  const Tensor x = x_in.detach();
  const std::string label = ctx.op + ".forward";
  const Tensor row_max = patch::local_extremum_keepdim(x, {ctx.dim}, ReduceOp::max);
  patch::all_reduce_over(ctx.mesh, {ctx.axis}, row_max, ReduceOp::max, label);
  const Tensor shifted = sub(x, row_max);
  const Tensor e = exp(shifted);
  const Tensor row_sum = sum(e, {ctx.dim}, true);
  patch::all_reduce_over(ctx.mesh, {ctx.axis}, row_sum, ReduceOp::sum, label);
  ctx.y = ctx.is_log ? sub(shifted, log(row_sum)) : div(e, row_sum);
  return ctx.y;
}

std::vector<Tensor> sharded_softmax_backward(ShardedSoftmaxCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  // softmax:     gx = y (g - sum_dim(g y))
  // log_softmax: gx = g - exp(y) sum_dim(g)
  const Tensor& g = grad_outputs[0];
  const Tensor row = sum(ctx.is_log ? g : mul(g, ctx.y), {ctx.dim}, true);
  patch::all_reduce_over(ctx.mesh, {ctx.axis}, row, ReduceOp::sum, ctx.op + ".backward");
  return {ctx.is_log ? sub(g, mul(exp(ctx.y), row)) : mul(ctx.y, sub(g, row))};
}

std::vector<SoftmaxPatch> softmax_table(const char* op, bool is_log) {
  auto local = [is_log](const ShardTensor& x, int dim) {
    return ShardTensor(is_log ? log_softmax(x.local(), dim) : softmax(x.local(), dim), x.spec());
  };
  auto sharded = [op, is_log](const ShardTensor& x, int dim) {
    const int d = wrap_dim(dim, x.dim(), op);
    ShardedSoftmaxCtx ctx{x.mesh(), x.spec().axis_sharding(d), d, is_log, op, Tensor()};
    const Tensor y = sharded_softmax_forward(ctx, x.local());
    // Recorded only when an input needs grad (inference keeps nothing alive). Whether one does is the same on
    // every rank, so every rank records the node and runs the backward's collectives together.
    return ShardTensor(
        record(op, {x.local()}, std::vector<Tensor>{y}, std::move(ctx), sharded_softmax_backward)[0],
        x.spec());
  };
  auto dim_unsharded = [op](const ShardTensor& x, int dim) {
    return !x.spec().any_partial() && x.spec().axis_sharding(wrap_dim(dim, x.dim(), op)) < 0;
  };
  auto no_partial = [](const ShardTensor& x, int) { return !x.spec().any_partial(); };
  return {{"softmax/unsharded-dim", dim_unsharded, local}, {"softmax/sharded-dim", no_partial, sharded}};
}

// The local op's argument checks (autograd/ops/softmax.cpp) on a stand-in for x's global tensor, before any
// patch runs: a non-float x or a dim out of range is the local op's error, named after the op the caller called
// (not an internal step such as the amax of the row maxima), the same on every rank — a zero-size shard, which
// would skip that amax, cannot walk on into the all-reduce alone.
void check_softmax_args(const char* op, const ShardTensor& x, int dim) {
  const Tensor xg = patch::global_stand_in(x);
  ops_detail::check_float(op, xg, "input");
  ops_detail::wrap_dim_of(op, dim, xg);
}

}  // namespace

ShardTensor softmax(const ShardTensor& x, int dim) {
  static const std::vector<SoftmaxPatch> table = softmax_table("softmax", false);
  check_softmax_args("softmax", x, dim);
  return dispatch_patch("softmax", table, {&x}, x, dim);
}

ShardTensor log_softmax(const ShardTensor& x, int dim) {
  static const std::vector<SoftmaxPatch> table = softmax_table("log_softmax", true);
  check_softmax_args("log_softmax", x, dim);
  return dispatch_patch("log_softmax", table, {&x}, x, dim);
}

}  // namespace shardrt
