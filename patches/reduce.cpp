// Sharded reductions: sum, mean, amax, amin, logsumexp over any set of dims (empty = all dims).
//
// Accepted placements: any Shard/Replicate placements; Partial -> MissingShardPatch (the sum of pending sums
//   would be fine, but the mean/max of one is not, and no caller needs the first).
// Arguments: checked first on x's global shape, as the local ops check them (f32/f64, dims in range and not
//   repeated; amax, amin: a non-empty reduction), with the op's own name, the same error on every rank.
// Output placements: a Shard axis whose dim is kept stays Shard, renumbered past removed dims (keepdim = false),
//   with its extents. A Shard axis whose dim is reduced becomes
//     sum, mean: Partial — the local result is this rank's share of the global one, left pending (no collective);
//                mean divides the local SUM by the GLOBAL count of reduced elements, so the pending sum is exact
//                for uneven and zero-size shards;
//     amax, amin: Replicate — the local max (min) is all-reduced (max, min);
//     logsumexp: Replicate — the distributed max, then the sum of exp(x - max), as a sharded softmax does.
//   Replicate axes stay Replicate. Global shape: reduced dims removed (or 1 with keepdim).
// Forward collectives: sum, mean: none. amax (amin) with a sharded reduced dim: one all_reduce (max, min) of the
//   output per such axis, under "<op>.forward", bytes = numel(local out) * itemsize * (P-1). logsumexp with a
//   sharded reduced dim: per such axis, under "logsumexp.forward", one all_reduce (max) of the local maxima, then
//   one all_reduce (sum) of the local sums of exp(x - max) — each numel(local out) * itemsize * (P-1) bytes.
// Backward collectives: sum, mean: none (the grad of a Partial output is the complete grad on every rank, and
//   each rank's share enters the sum with weight 1). amax (amin) with a sharded reduced dim: the grad goes to ONE
//   element per output, the first maximum (minimum) in global row-major order over the reduced dims (as the serial
//   op does). Each rank proposes the global index of its first element equal to the extremum; one all_reduce (min)
//   of these f64 indices per such axis under "<op>.backward", bytes = numel(local out) * 8 * (P-1), picks the
//   winner. logsumexp: none — dx = g exp(x - y) needs only the local x and the (replicated) global y.
// Saved for backward per rank: sum, mean: shapes only. amax/amin/logsumexp local: the local op's. amax/amin
//   sharded: local x, O(N/P), and the extremum, O(out). logsumexp sharded: local x, O(N/P), and y, O(out).
#include <algorithm>
#include <limits>
#include <string>

#include "autograd/function.h"
#include "autograd/ops/common.h"
#include "patches/dispatch.h"
#include "patches/ops.h"
#include "patches/patch_util.h"
#include "runtime/factories.h"

namespace shardrt {

namespace {

using ReducePatch = Patch<ShardTensor(ShardTensor, std::vector<int>, bool)>;

bool no_partial(const ShardTensor& x, const std::vector<int>&, bool) { return !x.spec().any_partial(); }

// The spec of x reduced over `dims` (wrapped): Shard axes of reduced dims become `reduced_to`.
ShardSpec reduced_spec(const ShardSpec& s, const std::vector<int>& dims, bool keepdim, Placement reduced_to) {
  auto is_reduced = [&](int d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  Shape global;
  for (int d = 0; d < s.ndim(); ++d)
    if (!is_reduced(d))
      global.push_back(s.global_shape()[d]);
    else if (keepdim)
      global.push_back(1);
  Placements placements = s.placements();
  auto extents = s.all_extents();
  for (size_t m = 0; m < placements.size(); ++m) {
    const Placement p = placements[m];
    if (!p.is_shard()) continue;
    if (is_reduced(p.dim)) {
      placements[m] = reduced_to;
      extents[m].clear();
    } else if (!keepdim) {
      int removed_before = 0;
      for (int d : dims) removed_before += d < p.dim;
      placements[m] = Placement::Shard(p.dim - removed_before);
    }
  }
  return s.with(placements, global, extents);
}

// ---- sum, mean ------------------------------------------------------------------------------------------------

ShardTensor sum_to_partial(const ShardTensor& x, const std::vector<int>& dims_in, bool keepdim) {
  const std::vector<int> dims = patch::wrap_dims("sum", dims_in, x.dim());
  return ShardTensor(sum(x.local(), dims, keepdim), reduced_spec(x.spec(), dims, keepdim, Placement::Partial()));
}

ShardTensor mean_to_partial(const ShardTensor& x, const std::vector<int>& dims_in, bool keepdim) {
  const std::vector<int> dims = patch::wrap_dims("mean", dims_in, x.dim());
  int64_t count = 1;  // reduced elements of the GLOBAL tensor, whatever this rank holds
  for (int d : dims) count *= x.global_shape()[d];
  const Tensor y = mul_scalar(sum(x.local(), dims, keepdim), 1.0 / static_cast<double>(count));
  return ShardTensor(y, reduced_spec(x.spec(), dims, keepdim, Placement::Partial()));
}

// ---- amax, amin ---------------------------------------------------------------------------------------------------

bool reduces_no_sharded_dim(const ShardTensor& x, const std::vector<int>& dims, bool keepdim) {
  return no_partial(x, dims, keepdim) &&
         patch::axes_sharding(x.spec(), patch::wrap_dims("reduce", dims, x.dim())).empty();
}

using LocalReduce = Tensor (*)(const Tensor&, const std::vector<int>&, bool);

// The local op on the local tensor: no reduced dim is sharded, so every output element is complete here.
ReducePatch local_patch(const char* name, LocalReduce f) {
  return {name, reduces_no_sharded_dim, [f](const ShardTensor& x, const std::vector<int>& dims_in, bool keepdim) {
            const std::vector<int> dims = patch::wrap_dims("reduce", dims_in, x.dim());
            return ShardTensor(f(x.local(), dims, keepdim),
                               reduced_spec(x.spec(), dims, keepdim, Placement::Replicate()));
          }};
}

struct ShardedAmaxCtx {
  std::string op;   // "amax" or "amin"
  ReduceOp extremum = ReduceOp::max;
  Mesh mesh;
  std::vector<int> axes;                // the axes sharding a reduced dim
  std::vector<int> dims;                // reduced dims, ascending
  std::vector<int64_t> offset, global;  // per dim of x: start of this rank's slice, global extent
  Tensor x, y;                          // local x and the global max (reduced dims kept with size 1)
};

Tensor sharded_amax_forward(ShardedAmaxCtx& ctx, const Tensor& x) {
  ctx.x = x.detach();
  ctx.y = patch::local_extremum_keepdim(x, ctx.dims, ctx.extremum);
  patch::all_reduce_over(ctx.mesh, ctx.axes, ctx.y, ctx.extremum, ctx.op + ".forward");
  return ctx.y;
}

// The global row-major index over the reduced dims of every local element, in f64 (exact to 2^53), shaped to
// broadcast against x: extent 1 on kept dims.
Tensor global_flat_index(const ShardedAmaxCtx& ctx) {
  const Shape& local = ctx.x.shape();
  const TensorOptions f64{DType::f64, ctx.x.device()};
  Tensor index = zeros(Shape(local.size(), 1), f64);
  double stride = 1;
  for (auto it = ctx.dims.rbegin(); it != ctx.dims.rend(); ++it) {
    const int d = *it;
    Shape along(local.size(), 1);
    along[d] = local[d];
    const double start = static_cast<double>(ctx.offset[d]);
    const Tensor coord = arange(start, start + static_cast<double>(local[d]), 1.0, f64).view(along);
    index = add(index, mul_scalar(coord, stride));
    stride *= static_cast<double>(ctx.global[d]);
  }
  return index;
}

std::vector<Tensor> sharded_amax_backward(ShardedAmaxCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor index = global_flat_index(ctx);
  // This rank's candidate per output: the lowest global index holding the extremum (+inf when it holds none).
  const Tensor inf = full({}, std::numeric_limits<double>::infinity(), {DType::f64, index.device()});
  const Tensor candidates = where(eq(ctx.x, ctx.y), index, inf);
  const Tensor winner = patch::local_extremum_keepdim(candidates, ctx.dims, ReduceOp::min);
  patch::all_reduce_over(ctx.mesh, ctx.axes, winner, ReduceOp::min, ctx.op + ".backward");
  const Tensor& g = grad_outputs[0];
  return {where(eq(index, winner), g, zeros({}, {g.dtype(), g.device()}))};
}

ShardTensor extremum_sharded(const char* op, ReduceOp extremum, const ShardTensor& x, const std::vector<int>& dims_in,
                             bool keepdim) {
  const std::vector<int> dims = patch::wrap_dims(op, dims_in, x.dim());
  ShardedAmaxCtx ctx{op,
                     extremum,
                     x.mesh(),
                     patch::axes_sharding(x.spec(), dims),
                     dims,
                     std::vector<int64_t>(static_cast<size_t>(x.dim()), 0),
                     x.global_shape(),
                     Tensor(),
                     Tensor()};
  for (int m : ctx.axes) ctx.offset[x.spec().placement(m).dim] = x.spec().offset(m);
  const ShardSpec spec = reduced_spec(x.spec(), dims, keepdim, Placement::Replicate());
  const Tensor y_kept = sharded_amax_forward(ctx, x.local());
  // Recorded only when an input needs grad (inference keeps nothing alive). Whether one does is the same on
  // every rank, so every rank records the node and runs the backward's collectives together.
  const Tensor y = record(op, {x.local()}, std::vector<Tensor>{y_kept}, std::move(ctx), sharded_amax_backward)[0];
  return ShardTensor(keepdim ? y : reshape(y, spec.local_shape()), spec);
}

// ---- logsumexp ----------------------------------------------------------------------------------------------

struct ShardedLogsumexpCtx {
  Tensor x, y;  // local x and the global result (reduced dims kept with size 1)
};

Tensor sharded_logsumexp_forward(ShardedLogsumexpCtx& ctx, const Mesh& mesh, const std::vector<int>& axes,
                                 const std::vector<int>& dims, const Tensor& x_in) {
  ctx.x = x_in.detach();
  const Tensor row_max = patch::local_extremum_keepdim(ctx.x, dims, ReduceOp::max);
  patch::all_reduce_over(mesh, axes, row_max, ReduceOp::max, "logsumexp.forward");
  // A row of -inf only (or an empty one) shifts by 0, not by -inf, so that its result is -inf and not NaN.
  const Tensor ninf = full({}, -std::numeric_limits<double>::infinity(), {x_in.dtype(), x_in.device()});
  const Tensor shift = where(eq(row_max, ninf), zeros({}, {x_in.dtype(), x_in.device()}), row_max);
  const Tensor row_sum = sum(exp(sub(ctx.x, shift)), dims, true);
  patch::all_reduce_over(mesh, axes, row_sum, ReduceOp::sum, "logsumexp.forward");
  ctx.y = add(shift, log(row_sum));
  return ctx.y;
}

std::vector<Tensor> sharded_logsumexp_backward(ShardedLogsumexpCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  // dy/dx = exp(x - y): y is the global result, so each local element's grad is local.
  return {mul(grad_outputs[0], exp(sub(ctx.x, ctx.y)))};
}

ShardTensor logsumexp_sharded(const ShardTensor& x, const std::vector<int>& dims_in, bool keepdim) {
  const std::vector<int> dims = patch::wrap_dims("logsumexp", dims_in, x.dim());
  const ShardSpec spec = reduced_spec(x.spec(), dims, keepdim, Placement::Replicate());
  ShardedLogsumexpCtx ctx;
  const Tensor y_kept =
      sharded_logsumexp_forward(ctx, x.mesh(), patch::axes_sharding(x.spec(), dims), dims, x.local());
  const Tensor y = record("logsumexp", {x.local()}, y_kept, std::move(ctx), sharded_logsumexp_backward);
  return ShardTensor(keepdim ? y : reshape(y, spec.local_shape()), spec);
}

// The local ops' argument checks (autograd/ops/reduce.cpp) on a stand-in for x's global tensor, before any patch
// runs, so that they are the same on every rank: a non-float x is the local op's DTypeError (a zero-size shard
// would otherwise skip its local amax and walk on into the all-reduce alone), and dims out of range or repeated a
// ShapeError. Returns the stand-in.
Tensor check_reduce_args(const char* op, const ShardTensor& x, const std::vector<int>& dims) {
  const Tensor xg = patch::global_stand_in(x);
  ops_detail::check_float(op, xg, "input");
  std::vector<bool> seen(static_cast<size_t>(x.dim()), false);
  for (int d : dims) {
    const int w = ops_detail::wrap_dim_of(op, d, xg);
    SHARDRT_CHECK(!seen[w], ShapeError, op, ": dim ", d, " given twice for ", xg.str());
    seen[w] = true;
  }
  return xg;
}

// An extremum over no element: the local op refuses it; sharded, every rank would all-reduce an empty part's
// -inf (+inf), a silently wrong result.
void check_extremum_args(const char* op, const ShardTensor& x, const std::vector<int>& dims) {
  const Tensor xg = check_reduce_args(op, x, dims);
  int64_t reduced = 1;
  for (int d : patch::wrap_dims(op, dims, x.dim())) reduced *= x.global_shape()[d];
  SHARDRT_CHECK(reduced > 0, ShapeError, op, ": cannot reduce over an empty dimension of ", xg.str());
}

}  // namespace

ShardTensor sum(const ShardTensor& x, const std::vector<int>& dims, bool keepdim) {
  static const std::vector<ReducePatch> table = {{"sum/sharded-dims-to-partial", no_partial, sum_to_partial}};
  check_reduce_args("sum", x, dims);
  return dispatch_patch("sum", table, {&x}, x, dims, keepdim);
}

ShardTensor mean(const ShardTensor& x, const std::vector<int>& dims, bool keepdim) {
  static const std::vector<ReducePatch> table = {{"mean/sharded-dims-to-partial", no_partial, mean_to_partial}};
  check_reduce_args("mean", x, dims);
  return dispatch_patch("mean", table, {&x}, x, dims, keepdim);
}

ShardTensor amax(const ShardTensor& x, const std::vector<int>& dims, bool keepdim) {
  static const std::vector<ReducePatch> table = {
      local_patch("amax/unsharded-dims", &shardrt::amax),
      {"amax/sharded-dims", no_partial, [](const ShardTensor& t, const std::vector<int>& d, bool k) {
         return extremum_sharded("amax", ReduceOp::max, t, d, k);
       }}};
  check_extremum_args("amax", x, dims);
  return dispatch_patch("amax", table, {&x}, x, dims, keepdim);
}

ShardTensor amin(const ShardTensor& x, const std::vector<int>& dims, bool keepdim) {
  static const std::vector<ReducePatch> table = {
      local_patch("amin/unsharded-dims", &shardrt::amin),
      {"amin/sharded-dims", no_partial, [](const ShardTensor& t, const std::vector<int>& d, bool k) {
         return extremum_sharded("amin", ReduceOp::min, t, d, k);
       }}};
  check_extremum_args("amin", x, dims);
  return dispatch_patch("amin", table, {&x}, x, dims, keepdim);
}

ShardTensor logsumexp(const ShardTensor& x, const std::vector<int>& dims, bool keepdim) {
  static const std::vector<ReducePatch> table = {local_patch("logsumexp/unsharded-dims", &shardrt::logsumexp),
                                                 {"logsumexp/sharded-dims", no_partial, logsumexp_sharded}};
  check_reduce_args("logsumexp", x, dims);
  return dispatch_patch("logsumexp", table, {&x}, x, dims, keepdim);
}

}  // namespace shardrt
