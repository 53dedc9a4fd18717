// Sharded normalisation: layer_norm over the trailing `normalized_shape` dims, and group_norm of x (N, C, *spatial)
// over (C / groups channels) x spatial. The placements pick the path:
//
//   patch                                  x on every mesh axis                    forward       backward
//   layer_norm/rows-sharded-or-replicated  R, or S(d) with d a leading dim         none          w|b
//   layer_norm/normalised-dims-sharded     R or S(any d), a normalised d sharded   2 stats / A   sums / A, w|b
//   group_norm/batch-or-spatial-sharded    R, S(0) (batch)                         none          w|b
//                                          R, S(0), S(d >= 2) (spatial, several    2 stats / A   sums / A, w|b
//                                          axes at once), a spatial d sharded
//   Partial anywhere, a sharded channel dim (group_norm) -> MissingShardPatch.
//
// Weight and bias are plain replicated Tensors (or undefined); on the normalised-dims patch they are narrowed
// (differentiably) to this rank's window of the sharded normalised dims. Output: x's spec unchanged (placements,
// global shape, per-rank extents).
//
// A is a STAT axis, one sharding a normalised (layer_norm) or spatial (group_norm) dim; n is the number of
// statistics this rank holds: its local row count (layer_norm) or N * groups (group_norm); acc = f64 for f64 x,
// else f32. Collectives, forward under "<op>.forward", backward under "<op>.backward":
//   2 stats / A   two all_reduce (sum) on each stat axis, n * sizeof(acc) * (P_A - 1) bytes each
//   sums / A      one all_reduce (sum) on each stat axis of the packed pair (sum of g*gamma, sum of g*gamma*xhat),
//                 2 * n * sizeof(acc) * (P_A - 1) bytes
//   w|b           when weight or bias requires grad: their grads (partial over every Shard axis of x) packed into
//                 one buffer of >= f32 and all-reduced (sum) once per Shard axis, in axis order
//                 (reduce_grads_over): (numel(w) + numel(b)) * max(4, itemsize) * (P - 1) bytes per axis; nothing
//                 for replicated x
// Statistics over stat axes: two passes, never E[x^2]-E[x]^2: s1 = local sum, all-reduced; mean = s1 / count;
//   s2 = local sum of (x - mean)^2, all-reduced; var = s2 / count. The count is global and exact from the spec
//   (Cg * prod(global spatial), or prod(normalized_shape)), so uneven and zero-size shards are exact (an empty
//   shard contributes 0 to both sums). Without a stat axis every statistic is on the rank holding its row/group:
//   the local op.
// Saved for backward per rank: the local op's (local x, O(N/P), per-row mean and rstd, and the weight) without a
//   stat axis; with one, xhat in acc (local numel, O(N/P)), rstd (n) and the (broadcast-shaped) weight view.
#include <algorithm>

#include "autograd/function.h"
#include "patches/dispatch.h"
#include "patches/ops.h"
#include "patches/patch_util.h"

namespace shardrt {

namespace {

// Normalisation of a 4-D view x4 (A, B, C, D) over dims {2, 3}: one statistic per (a, b). gamma4/beta4 broadcast
// against x4 (or are undefined).
struct ShardedNormCtx {
  Mesh mesh;
  std::vector<int> stat_axes;
  std::string op;
  double count = 0;  // global number of elements per statistic
  double eps = 0;
  bool has_w = false, has_b = false;
  DType in_dtype = DType::f64;
  Tensor xhat, rstd, gamma;  // gamma in acc
  Shape w_shape, b_shape;
};

DType acc_dtype(DType d) { return d == DType::f64 ? DType::f64 : DType::f32; }

// Sum of t over the dims where `shape` has size 1 and t does not, to `shape`.
Tensor sum_to(const Tensor& t, const Shape& shape) {
  std::vector<int> dims;
  for (int d = 0; d < t.dim(); ++d)
    if (shape[d] == 1 && t.size(d) != 1) dims.push_back(d);
  return dims.empty() ? t : sum(t, dims, true);
}

Tensor sharded_norm_forward(ShardedNormCtx& ctx, const Tensor& x4, const Tensor& gamma4, const Tensor& beta4) {
  const DType acc = acc_dtype(x4.dtype());
  const std::string label = ctx.op + ".forward";
  const Tensor xa = x4.detach().to(acc);
  const double inv_n = 1.0 / ctx.count;
  const Tensor s1 = sum(xa, {2, 3}, true).contiguous();
  patch::all_reduce_over(ctx.mesh, ctx.stat_axes, s1, ReduceOp::sum, label);
  const Tensor centred = sub(xa, mul_scalar(s1, inv_n));
  const Tensor s2 = sum(mul(centred, centred), {2, 3}, true).contiguous();
  patch::all_reduce_over(ctx.mesh, ctx.stat_axes, s2, ReduceOp::sum, label);
  ctx.rstd = rsqrt(add_scalar(mul_scalar(s2, inv_n), ctx.eps));
  ctx.xhat = mul(centred, ctx.rstd);
  Tensor y = ctx.xhat;
  if (ctx.has_w) {
    ctx.gamma = gamma4.detach().to(acc);
    ctx.w_shape = gamma4.shape();
    y = mul(y, ctx.gamma);
  }
  if (ctx.has_b) {
    ctx.b_shape = beta4.shape();
    y = add(y, beta4.detach().to(acc));
  }
  return y.to(x4.dtype());
}

std::vector<Tensor> sharded_norm_backward(ShardedNormCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const DType acc = ctx.xhat.dtype();
  const Tensor ga = grad_outputs[0].to(acc);
  const Tensor gh = ctx.has_w ? mul(ga, ctx.gamma) : ga;
  // dx = rstd (gh - mean(gh) - xhat mean(gh xhat)), the two group sums packed into one all-reduce.
  const Tensor sums = cat({sum(gh, {2, 3}, true), sum(mul(gh, ctx.xhat), {2, 3}, true)}, 0).contiguous();
  patch::all_reduce_over(ctx.mesh, ctx.stat_axes, sums, ReduceOp::sum, ctx.op + ".backward");
  const int64_t a = gh.size(0);
  const double inv_n = 1.0 / ctx.count;
  const Tensor mean_gh = mul_scalar(sums.narrow(0, 0, a), inv_n);
  const Tensor mean_ghx = mul_scalar(sums.narrow(0, a, a), inv_n);
  const Tensor dx = mul(ctx.rstd, sub(sub(gh, mean_gh), mul(ctx.xhat, mean_ghx)));
  std::vector<Tensor> grads = {dx.to(ctx.in_dtype)};
  if (ctx.has_w) grads.push_back(sum_to(mul(ga, ctx.xhat), ctx.w_shape).to(ctx.in_dtype));
  if (ctx.has_b) grads.push_back(sum_to(ga, ctx.b_shape).to(ctx.in_dtype));
  return grads;
}

// Runs the recorded op on x4 and the broadcast-shaped affine views (the affine tensors carry the param grads).
Tensor sharded_norm(const char* op, const Mesh& mesh, std::vector<int> stat_axes, double count, double eps,
                    const Tensor& x4, const Tensor& gamma4, const Tensor& beta4) {
  ShardedNormCtx ctx{mesh,          std::move(stat_axes), op,           count,
                     eps,           gamma4.defined(),     beta4.defined(), x4.dtype(), {}, {}, {}, {}, {}};
  const Tensor y = sharded_norm_forward(ctx, x4, gamma4, beta4);
  std::vector<Tensor> inputs = {x4};
  if (ctx.has_w) inputs.push_back(gamma4);
  if (ctx.has_b) inputs.push_back(beta4);
  // Every rank records the node: its backward has a collective even where this rank's inputs need no grad.
  return record_collective(op, inputs, std::vector<Tensor>{y}, true, std::move(ctx), sharded_norm_backward)[0];
}

// ---- group_norm ---------------------------------------------------------------------------------------------

using GroupNormPatch = Patch<ShardTensor(ShardTensor, int64_t, Tensor, Tensor, double)>;

bool channels_unsharded(const ShardTensor& x, int64_t, const Tensor&, const Tensor&, double) {
  return x.dim() >= 3 && !x.spec().any_partial() && x.spec().axis_sharding(1) < 0;
}

ShardTensor group_norm_sharded(const ShardTensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                               double eps) {
  const Shape& gs = x.global_shape();
  const int64_t n = gs[0], c = gs[1];
  SHARDRT_CHECK(groups > 0 && c % groups == 0, ShapeError, "group_norm: ", c, " channels not divisible into ", groups,
                " groups, x ", x.str());
  std::vector<int> spatial;
  for (int d = 2; d < x.dim(); ++d) spatial.push_back(d);
  const std::vector<int> stat_axes = patch::axes_sharding(x.spec(), spatial);
  const std::vector<Tensor> p = patch::reduce_grads_over("group_norm", x.mesh(), patch::shard_axes(x.spec()),
                                                         {weight, bias});
  if (stat_axes.empty())
    return ShardTensor(group_norm(x.local(), groups, p[0], p[1], eps), x.spec());
  const int64_t cg = c / groups;
  double count = static_cast<double>(cg);
  for (int d : spatial) count *= static_cast<double>(gs[d]);
  const Shape local_shape = x.local().shape();
  const int64_t s_local = x.local().numel() / std::max<int64_t>(1, local_shape[0] * c);
  const int64_t n_local = local_shape[0];
  (void)n;
  const Tensor x4 = reshape(contiguous(x.local()), {n_local, groups, cg, s_local});
  const Tensor g4 = p[0].defined() ? reshape(p[0], {1, groups, cg, 1}) : Tensor();
  const Tensor b4 = p[1].defined() ? reshape(p[1], {1, groups, cg, 1}) : Tensor();
  const Tensor y4 = sharded_norm("group_norm", x.mesh(), stat_axes, count, eps, x4, g4, b4);
  return ShardTensor(reshape(y4, local_shape), x.spec());
}

// ---- layer_norm ----------------------------------------------------------------------------------------------

using LayerNormPatch = Patch<ShardTensor(ShardTensor, Shape, Tensor, Tensor, double)>;

bool normalized_dims_unsharded(const ShardTensor& x, const Shape& normalized_shape, const Tensor&, const Tensor&,
                               double) {
  const int first = x.dim() - static_cast<int>(normalized_shape.size());
  if (first < 0 || x.spec().any_partial()) return false;
  for (int d = first; d < x.dim(); ++d)
    if (x.spec().axis_sharding(d) >= 0) return false;
  return true;
}

// No normalised dim sharded: each row is whole on one rank, so the local op runs; only the affine grads meet
// other ranks' rows.
ShardTensor layer_norm_rows(const ShardTensor& x, const Shape& normalized_shape, const Tensor& weight,
                            const Tensor& bias, double eps) {
  const std::vector<Tensor> p =
      patch::reduce_grads_over("layer_norm", x.mesh(), patch::shard_axes(x.spec()), {weight, bias});
  return ShardTensor(layer_norm(x.local(), normalized_shape, p[0], p[1], eps), x.spec());
}

// A normalised dim sharded (the first patch takes the others): the statistics are merged across the stat axes.
bool normalised_dims_match(const ShardTensor& x, const Shape& normalized_shape, const Tensor&, const Tensor&, double) {
  const int first = x.dim() - static_cast<int>(normalized_shape.size());
  if (first < 0 || x.spec().any_partial()) return false;
  for (int d = first; d < x.dim(); ++d)
    if (x.global_shape()[d] != normalized_shape[d - first]) return false;
  return true;
}

ShardTensor layer_norm_stats(const ShardTensor& x, const Shape& normalized_shape, const Tensor& weight,
                             const Tensor& bias, double eps) {
  const int first = x.dim() - static_cast<int>(normalized_shape.size());
  std::vector<int> norm_dims;
  for (int d = first; d < x.dim(); ++d) norm_dims.push_back(d);
  const std::vector<int> stat_axes = patch::axes_sharding(x.spec(), norm_dims);
  const std::vector<Tensor> p =
      patch::reduce_grads_over("layer_norm", x.mesh(), patch::shard_axes(x.spec()), {weight, bias});
  // This rank's window of the replicated affine parameters: their grads land in the window, zeros elsewhere,
  // and reduce_grads_over sums the windows into the complete grad.
  auto window = [&](Tensor t) {
    if (!t.defined()) return t;
    for (int m : stat_axes) {
      const int d = x.spec().placement(m).dim;
      t = narrow(t, d - first, x.spec().offset(m), x.local().size(d));
    }
    return t;
  };
  const Shape local_shape = x.local().shape();
  int64_t rows = 1, cols = 1;
  for (int d = 0; d < x.dim(); ++d) (d < first ? rows : cols) *= local_shape[d];
  double count = 1;
  for (int64_t s : normalized_shape) count *= static_cast<double>(s);
  const Tensor x4 = reshape(contiguous(x.local()), {rows, 1, 1, cols});
  const Tensor w = window(p[0]), b = window(p[1]);
  const Tensor g4 = w.defined() ? reshape(contiguous(w), {1, 1, 1, cols}) : Tensor();
  const Tensor b4 = b.defined() ? reshape(contiguous(b), {1, 1, 1, cols}) : Tensor();
  const Tensor y4 = sharded_norm("layer_norm", x.mesh(), stat_axes, count, eps, x4, g4, b4);
  return ShardTensor(reshape(y4, local_shape), x.spec());
}

}  // namespace

ShardTensor group_norm(const ShardTensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  static const std::vector<GroupNormPatch> table = {
      {"group_norm/batch-or-spatial-sharded", channels_unsharded, group_norm_sharded}};
  return dispatch_patch("group_norm", table, {&x}, x, groups, weight, bias, eps);
}

ShardTensor layer_norm(const ShardTensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                       double eps) {
  static const std::vector<LayerNormPatch> table = {
      {"layer_norm/rows-sharded-or-replicated", normalized_dims_unsharded, layer_norm_rows},
      {"layer_norm/normalised-dims-sharded", normalised_dims_match, layer_norm_stats}};
  return dispatch_patch("layer_norm", table, {&x}, x, normalized_shape, weight, bias, eps);
}

}  // namespace shardrt
