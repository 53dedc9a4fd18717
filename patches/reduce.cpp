// Sharded reductions: sum, mean, amax over any set of dims (empty = all dims).
//
// Accepted placements: any Shard/Replicate placements; Partial -> MissingShardPatch (the sum of pending sums
//   would be fine, but the mean/max of one is not, and no caller needs the first).
// Arguments: checked first on x's global shape, as the local ops check them (f32/f64, dims in range and not
//   repeated; amax: a non-empty reduction), with the op's own name, the same error on every rank.
// Output placements: a Shard axis whose dim is kept stays Shard, renumbered past removed dims (keepdim = false),
//   with its extents. A Shard axis whose dim is reduced becomes
//     sum, mean: Partial — the local result is this rank's share of the global one, left pending (no collective);
//                mean divides the local SUM by the GLOBAL count of reduced elements, so the pending sum is exact
//                for uneven and zero-size shards;
//     amax:      Replicate — the local max is all-reduced (max).
//   Replicate axes stay Replicate. Global shape: reduced dims removed (or 1 with keepdim).
// Forward collectives: sum, mean: none. amax with a sharded reduced dim: one all_reduce (max) of the output per
//   such axis, under "amax.forward", bytes = numel(local out) * itemsize * (P-1).
// Backward collectives: sum, mean: none (the grad of a Partial output is the complete grad on every rank, and
//   each rank's share enters the sum with weight 1). amax with a sharded reduced dim: the grad goes to ONE element
//   per output, the first maximum in global row-major order over the reduced dims (as the serial op does). Each
//   rank proposes the global index of its first element equal to the max; one all_reduce (min) of these f64
//   indices per such axis under "amax.backward", bytes = numel(local out) * 8 * (P-1), picks the winner.
// Saved for backward per rank: sum, mean: shapes only. amax local: the local op's index, O(out). amax sharded:
//   local x, O(N/P), and the max, O(out).
#include <algorithm>
#include <limits>

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

// ---- amax -------------------------------------------------------------------------------------------------------

bool reduces_no_sharded_dim(const ShardTensor& x, const std::vector<int>& dims, bool keepdim) {
  return no_partial(x, dims, keepdim) &&
         patch::axes_sharding(x.spec(), patch::wrap_dims("amax", dims, x.dim())).empty();
}

ShardTensor amax_local(const ShardTensor& x, const std::vector<int>& dims_in, bool keepdim) {
  const std::vector<int> dims = patch::wrap_dims("amax", dims_in, x.dim());
  return ShardTensor(amax(x.local(), dims, keepdim), reduced_spec(x.spec(), dims, keepdim, Placement::Replicate()));
}

struct ShardedAmaxCtx {
  Mesh mesh;
  std::vector<int> axes;                // the axes sharding a reduced dim
  std::vector<int> dims;                // reduced dims, ascending
  std::vector<int64_t> offset, global;  // per dim of x: start of this rank's slice, global extent
  Tensor x, y;                          // local x and the global max (reduced dims kept with size 1)
};

Tensor sharded_amax_forward(ShardedAmaxCtx& ctx, const Tensor& x) {
  ctx.x = x.detach();
  ctx.y = patch::local_extremum_keepdim(x, ctx.dims, ReduceOp::max);
  patch::all_reduce_over(ctx.mesh, ctx.axes, ctx.y, ReduceOp::max, "amax.forward");
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
  // This rank's candidate per output: the lowest global index holding the max (+inf when it holds none).
  const Tensor inf = full({}, std::numeric_limits<double>::infinity(), {DType::f64, index.device()});
  const Tensor candidates = where(eq(ctx.x, ctx.y), index, inf);
  const Tensor winner = patch::local_extremum_keepdim(candidates, ctx.dims, ReduceOp::min);
  patch::all_reduce_over(ctx.mesh, ctx.axes, winner, ReduceOp::min, "amax.backward");
  const Tensor& g = grad_outputs[0];
  return {where(eq(index, winner), g, zeros({}, {g.dtype(), g.device()}))};
}

ShardTensor amax_sharded(const ShardTensor& x, const std::vector<int>& dims_in, bool keepdim) {
  const std::vector<int> dims = patch::wrap_dims("amax", dims_in, x.dim());
  ShardedAmaxCtx ctx{x.mesh(),
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
  const Tensor y = record_collective("amax", {x.local()}, std::vector<Tensor>{y_kept}, any_requires_grad({x.local()}), std::move(ctx),
                                     sharded_amax_backward)[0];
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
  static const std::vector<ReducePatch> table = {{"amax/unsharded-dims", reduces_no_sharded_dim, amax_local},
                                                 {"amax/sharded-dims", no_partial, amax_sharded}};
  const Tensor xg = check_reduce_args("amax", x, dims);
  // A max over no element: the local op refuses it; sharded, every rank would all-reduce an empty part's -inf,
  // a silently wrong result.
  int64_t reduced = 1;
  for (int d : patch::wrap_dims("amax", dims, x.dim())) reduced *= x.global_shape()[d];
  SHARDRT_CHECK(reduced > 0, ShapeError, "amax: cannot reduce over an empty dimension of ", xg.str());
  return dispatch_patch("amax", table, {&x}, x, dims, keepdim);
}

}  // namespace shardrt
