// Sharded normalisation: layer_norm over the trailing `normalized_shape` dims, and group_norm of x (N, C, *spatial)
// over (C / groups channels) x spatial. The placements pick the path:
//
//   patch                                  x on every mesh axis                    forward       backward
//   layer_norm/rows-sharded-or-replicated  R, or S(d) with d a leading dim         none          w|b
//   layer_norm/normalised-dims-sharded     R or S(any d), a normalised d sharded   moments / A   sums / A, w|b
//   group_norm/batch-or-spatial-sharded    R, S(0) (batch)                         none          w|b
//                                          R, S(0), S(d >= 2) (spatial, several    moments / A   sums / A, w|b
//                                          axes at once), a spatial d sharded
//   Partial anywhere, a sharded channel dim (group_norm) -> MissingShardPatch.
//
// Weight and bias are plain replicated Tensors (or undefined); on the normalised-dims patch they are narrowed
// (differentiably) to this rank's window of the sharded normalised dims. Output: x's spec unchanged (placements,
// global shape, per-rank extents).
//
// A is a STAT axis, one sharding a normalised (layer_norm) or spatial (group_norm) dim; n is the number of
// statistics this rank holds: its local row count (layer_norm) or N * groups (group_norm). Collectives, forward
// under "<op>.forward", backward under "<op>.backward":
//   moments / A   one all_gather on each stat axis (in axis order) of this rank's packed (mean, M2) in f64,
//                 2 * n * 8 * (P_A - 1) bytes
//   sums / A      one all_reduce (sum) on each stat axis of the packed pair (sum of g*gamma, sum of g*gamma*xhat)
//                 in f64, 2 * n * 8 * (P_A - 1) bytes
//   w|b           when weight or bias requires grad: their grads (partial over every Shard axis of x) packed into
//                 one buffer of >= f32 and all-reduced (sum) once per Shard axis, in axis order
//                 (reduce_grads_over): (numel(w) + numel(b)) * max(4, itemsize) * (P - 1) bytes per axis; nothing
//                 for replicated x
// Statistics over stat axes, in f64 for every dtype of x (an f32 mean rounded before the deviations are taken
//   costs ~|mean| * 6e-8 of accuracy: 1e-2 at offset 1e5): each rank takes count, mean and M2 (sum of squared
//   deviations from its mean, two local passes) of its shard; each stat axis all-gathers the (mean, M2) pairs
//   and every rank folds them in coordinate order with Chan et al.'s combination, so every rank gets
//   bit-identical statistics. The counts are not sent: every rank's count is exact from the spec's extents, and
//   an empty shard (count 0) is skipped by the fold, exactly. var = M2 / count, with the global count.
//   Not an all_reduce of (count, sum, sum of squares about a shift): exact only with a shift near the mean,
//   which no rank knows before the collective, and its summation order is the library's, not a fixed one.
//   Without a stat axis every statistic is on the rank holding its row/group: the local op.
// Saved for backward per rank: the local op's (local x, O(N/P), per-row mean and rstd, and the weight) without a
//   stat axis; with one, the local x in its dtype (O(N/P); xhat is recomputed in f64 from it), mean and rstd
//   (n, f64) and the (broadcast-shaped) weight view in f64.
#include <algorithm>
#include <string>
#include <vector>

#include "autograd/function.h"
#include "patches/dispatch.h"
#include "patches/mutants.h"
#include "patches/ops.h"
#include "patches/patch_util.h"
#include "runtime/factories.h"

namespace shardrt {

namespace {

// Normalisation of a 4-D view x4 (A, B, C, D) over dims {2, 3}: one statistic per (a, b). gamma4/beta4 broadcast
// against x4 (or are undefined). stage_counts[k][j]: the elements of one statistic held by the rank at
// coordinate j along stat_axes[k] once the axes before k are merged (counts_per_merge_stage).
struct ShardedNormCtx {
  Mesh mesh;
  std::vector<int> stat_axes;
  std::vector<std::vector<double>> stage_counts;
  std::string op;
  double eps = 0;
  bool has_w = false, has_b = false;
  DType in_dtype = DType::f64;
  // Set by the forward: the global number of elements per statistic; the local input (its dtype); mean and
  // rstd, (A, B, 1, 1) in f64; gamma4 in f64.
  double count = 0;
  Tensor x{}, mean{}, rstd{}, gamma{};
  Shape w_shape{}, b_shape{};
};

// Sum of t over the dims where `shape` has size 1 and t does not, to `shape`.
Tensor sum_to(const Tensor& t, const Shape& shape) {
  std::vector<int> dims;
  for (int d = 0; d < t.dim(); ++d)
    if (shape[d] == 1 && t.size(d) != 1) dims.push_back(d);
  return dims.empty() ? t : sum(t, dims, true);
}

// What the rank at coordinate j along stat_axes[k] holds of one statistic's elements once the axes before k are
// merged: dims sharded by those axes count whole, the dim of axis k with rank j's extent, the dims of later axes
// with this rank's own extent. The spec knows every rank's extents, so the counts never travel.
// per_position: elements per position of `dims` (a group's channels for group_norm, 1 for layer_norm).
std::vector<std::vector<double>> counts_per_merge_stage(const ShardSpec& spec, const std::vector<int>& dims,
                                                        const std::vector<int>& stat_axes, double per_position) {
  const Shape local = spec.local_shape();
  std::vector<bool> merged(spec.ndim(), false);
  std::vector<std::vector<double>> stages;
  for (int m : stat_axes) {
    const int dm = spec.placement(m).dim;
    std::vector<double> counts;
    for (int64_t e : spec.extents(m)) {
      double c = per_position;
      for (int d : dims) c *= static_cast<double>(d == dm ? e : merged[d] ? spec.global_shape()[d] : local[d]);
      counts.push_back(c);
    }
    stages.push_back(std::move(counts));
    merged[dm] = true;
  }
  return stages;
}

// count, mean and M2 (sum of squared deviations from the mean) of each statistic, in f64.
struct Moments {
  double count = 0;
  Tensor mean, m2;
};

// Chan et al.'s pairwise combination a += b. It needs no shift shared in advance and never subtracts large
// sums, so it is as accurate as a two-pass over the union; an empty side changes nothing, exactly.
void combine_into(Moments& a, double nb, const Tensor& mean_b, const Tensor& m2_b) {
  if (nb == 0) return;
  if (a.count == 0) {
    a = {nb, mean_b, m2_b};
    return;
  }
  const double n = a.count + nb;
  const Tensor delta = sub(mean_b, a.mean);
  a.mean = add(a.mean, mul_scalar(delta, nb / n));
  a.m2 = add(add(a.m2, m2_b), mul_scalar(mul(delta, delta), a.count * nb / n));
  a.count = n;
}

// The moments of the union over every stat axis: per axis ONE all_gather of every rank's (mean, M2), folded in
// coordinate order. Every rank of the axis folds the same data in the same order, so all of them get
// bit-identical statistics (axis by axis, so on every rank of the mesh). An all_reduce of sums could not do
// this: sums of squares about a shift are only accurate when the shift is near the mean, which no rank knows
// before the collective, and an all_reduce's summation order is the library's, not ours.
Moments merge_over_stat_axes(const ShardedNormCtx& ctx, Moments local) {
  const std::string label = ctx.op + ".forward";
  const int64_t a = local.mean.size(0);
  for (size_t k = 0; k < ctx.stat_axes.size(); ++k) {
    Communicator& comm = patch::axis_comm(ctx.mesh, ctx.stat_axes[k]);
    const Tensor mine = cat({local.mean, local.m2}, 0).contiguous();
    Shape all_shape = mine.shape();
    all_shape[0] *= comm.size();
    const Tensor all = zeros(all_shape, {DType::f64, mine.device()});
    {
      auto scope = comm.ledger().scope(label);
      comm.all_gather(mine, all);
    }
    Moments merged{0, zeros(local.mean.shape(), {DType::f64, mine.device()}),
                   zeros(local.m2.shape(), {DType::f64, mine.device()})};
    for (int j = 0; j < comm.size(); ++j)
      combine_into(merged, ctx.stage_counts[k][j], all.narrow(0, 2 * a * j, a), all.narrow(0, 2 * a * j + a, a));
    local = merged;
  }
  return local;
}

// Statistics in f64 whatever x's dtype (f32 data far from zero keeps its digits), normalised in f64, rounded
// once to x's dtype.
Tensor sharded_norm_forward(ShardedNormCtx& ctx, const Tensor& x4, const Tensor& gamma4, const Tensor& beta4) {
  const Tensor xa = x4.detach().to(DType::f64);
  const double local_count = static_cast<double>(x4.size(2) * x4.size(3));
  // An empty shard: sum 0, scaled by 0 rather than divided by 0.
  const Tensor local_mean = mul_scalar(sum(xa, {2, 3}, true), local_count > 0 ? 1.0 / local_count : 0.0);
  const Tensor local_centred = sub(xa, local_mean);
  const Moments m =
      merge_over_stat_axes(ctx, {local_count, local_mean, sum(mul(local_centred, local_centred), {2, 3}, true)});
  ctx.count = m.count;
  ctx.x = x4.detach();
  ctx.mean = m.mean;
  ctx.rstd = rsqrt(add_scalar(mul_scalar(m.m2, 1.0 / m.count), ctx.eps));
  Tensor y = mul(sub(xa, ctx.mean), ctx.rstd);
  if (ctx.has_w) {
    ctx.gamma = gamma4.detach().to(DType::f64);
    ctx.w_shape = gamma4.shape();
    y = mul(y, ctx.gamma);
  }
  if (ctx.has_b) {
    ctx.b_shape = beta4.shape();
    y = add(y, beta4.detach().to(DType::f64));
  }
  return y.to(x4.dtype());
}

// In f64 like the forward; xhat is recomputed from the saved x (x's dtype) rather than saved in f64.
std::vector<Tensor> sharded_norm_backward(ShardedNormCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor xhat = mul(sub(ctx.x.to(DType::f64), ctx.mean), ctx.rstd);
  const Tensor ga = grad_outputs[0].to(DType::f64);
  const Tensor gh = ctx.has_w ? mul(ga, ctx.gamma) : ga;
  // dx = rstd (gh - mean(gh) - xhat mean(gh xhat)), the two group sums packed into one all-reduce.
  const Tensor sums = cat({sum(gh, {2, 3}, true), sum(mul(gh, xhat), {2, 3}, true)}, 0).contiguous();
  const Tensor reduced = SHARDRT_MUTANT(norm_skip_stat_reduction) ? sums.narrow(0, 0, gh.size(0)) : sums;  // mutants.h
  patch::all_reduce_over(ctx.mesh, ctx.stat_axes, reduced, ReduceOp::sum, ctx.op + ".backward");
  const int64_t a = gh.size(0);
  const double inv_n = 1.0 / ctx.count;
  const Tensor mean_gh = mul_scalar(sums.narrow(0, 0, a), inv_n);
  const Tensor mean_ghx = mul_scalar(sums.narrow(0, a, a), inv_n);
  const Tensor dx = mul(ctx.rstd, sub(sub(gh, mean_gh), mul(xhat, mean_ghx)));
  std::vector<Tensor> grads = {dx.to(ctx.in_dtype)};
  if (ctx.has_w) grads.push_back(sum_to(mul(ga, xhat), ctx.w_shape).to(ctx.in_dtype));
  if (ctx.has_b) grads.push_back(sum_to(ga, ctx.b_shape).to(ctx.in_dtype));
  return grads;
}

// Runs the recorded op on x4 and the broadcast-shaped affine views (the affine tensors carry the param grads).
Tensor sharded_norm(const char* op, const Mesh& mesh, std::vector<int> stat_axes,
                    std::vector<std::vector<double>> counts, double eps, const Tensor& x4, const Tensor& gamma4,
                    const Tensor& beta4) {
  ShardedNormCtx ctx{.mesh = mesh,
                     .stat_axes = std::move(stat_axes),
                     .stage_counts = std::move(counts),
                     .op = op,
                     .eps = eps,
                     .has_w = gamma4.defined(),
                     .has_b = beta4.defined(),
                     .in_dtype = x4.dtype()};
  const Tensor y = sharded_norm_forward(ctx, x4, gamma4, beta4);
  std::vector<Tensor> inputs = {x4};
  if (ctx.has_w) inputs.push_back(gamma4);
  if (ctx.has_b) inputs.push_back(beta4);
  // Recorded when an input needs grad (the same on every rank, so all run the backward's collective together).
  return record(op, inputs, std::vector<Tensor>{y}, std::move(ctx), sharded_norm_backward)[0];
}

// ---- group_norm ---------------------------------------------------------------------------------------------

using GroupNormPatch = Patch<ShardTensor(ShardTensor, int64_t, Tensor, Tensor, double)>;

bool channels_unsharded(const ShardTensor& x, int64_t, const Tensor&, const Tensor&, double) {
  return x.dim() >= 3 && !x.spec().any_partial() && x.spec().axis_sharding(1) < 0;
}

ShardTensor group_norm_sharded(const ShardTensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                               double eps) {
  const Shape& gs = x.global_shape();
  const int64_t c = gs[1];
  SHARDRT_CHECK(groups > 0 && c % groups == 0, ShapeError, "group_norm: ", c, " channels not divisible into ", groups,
                " groups, x ", x.str());
  std::vector<int> spatial;
  for (int d = 2; d < x.dim(); ++d) spatial.push_back(d);
  const std::vector<int> stat_axes = patch::axes_sharding(x.spec(), spatial);
  const std::vector<Tensor> p = patch::reduce_param_grads("group_norm", x.spec(), {weight, bias});
  if (stat_axes.empty())
    return ShardTensor(group_norm(x.local(), groups, p[0], p[1], eps), x.spec());
  const int64_t cg = c / groups;
  const Shape local_shape = x.local().shape();
  const int64_t s_local = x.local().numel() / std::max<int64_t>(1, local_shape[0] * c);
  const int64_t n_local = local_shape[0];
  const Tensor x4 = reshape(contiguous(x.local()), {n_local, groups, cg, s_local});
  const Tensor g4 = p[0].defined() ? reshape(p[0], {1, groups, cg, 1}) : Tensor();
  const Tensor b4 = p[1].defined() ? reshape(p[1], {1, groups, cg, 1}) : Tensor();
  const Tensor y4 = sharded_norm("group_norm", x.mesh(), stat_axes,
                                  counts_per_merge_stage(x.spec(), spatial, stat_axes, static_cast<double>(cg)), eps,
                                  x4, g4, b4);
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
      patch::reduce_param_grads("layer_norm", x.spec(), {weight, bias});
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
      patch::reduce_param_grads("layer_norm", x.spec(), {weight, bias});
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
  const Tensor x4 = reshape(contiguous(x.local()), {rows, 1, 1, cols});
  const Tensor w = window(p[0]), b = window(p[1]);
  const Tensor g4 = w.defined() ? reshape(contiguous(w), {1, 1, 1, cols}) : Tensor();
  const Tensor b4 = b.defined() ? reshape(contiguous(b), {1, 1, 1, cols}) : Tensor();
  const Tensor y4 = sharded_norm("layer_norm", x.mesh(), stat_axes,
                                  counts_per_merge_stage(x.spec(), norm_dims, stat_axes, 1.0), eps, x4, g4, b4);
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
