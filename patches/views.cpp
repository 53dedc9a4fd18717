// Sharded views and shape ops: reshape, view, permute, transpose, unsqueeze, squeeze, select, expand, cat, split.
//
// Accepted placements: any Shard/Replicate placements, as long as every sharded dim survives whole:
//   reshape/view: each sharded dim d (sharded by one mesh axis) must, with the same product of leading dims,
//     reappear in the new shape either whole (same size and trailing product), or merged with the unsharded dims
//     right after it ((B, H, W, C) with H sharded -> (B, H*W, C): rank r's rows become the contiguous range of
//     H-extent * W tokens), or split into a leading part and trailing dims whose product divides every rank's
//     extent (the inverse). In each case a rank's block is contiguous in row-major order, so the local reshape of
//     every shard is a slice of the global reshape; extents scale by the merged (split) trailing product.
//     Anything else (a sharded dim merged behind another dim, split across ranks' blocks) is rejected.
//   squeeze/select: the dim removed must not be sharded. cat: along an unsharded dim; every input on the same
//     mesh with the same placements; an input whose extents differ from the first input's (a caller
//     decomposition of the same global size) is first redistributed to them (patches/align.h), or, under the
//     strict policy, is a MissingShardPatch naming both placements and extents.
//   permute/transpose/unsqueeze: always.
//   Anything else, and any Partial input -> MissingShardPatch.
// Output: the same placements with sharded dims renumbered to where they moved; a sharded dim keeps its per-rank
//   extents; global shape = the op applied to the global shape. All computed locally.
// Forward and backward collectives: none, but cat's alignment of an input with other extents: one all_to_all_v
//   per such input and axis forward (scope "redistribute"), and its reverse backward ("redistribute.backward").
// Arguments of expand and split: the local op's checks run first on a stand-in of the global tensor (the same
//   error on every rank, before the placements are looked at).
// Saved for backward per rank: shapes only (the local view ops' own contexts).
#include <numeric>
#include <optional>

#include "autograd/tape.h"
#include "patches/align.h"
#include "patches/dispatch.h"
#include "patches/ops.h"
#include "patches/patch_util.h"

namespace shardrt {

namespace {

using LocalReshape = Tensor (*)(const Tensor&, const Shape&);
using ReshapePatch = Patch<ShardTensor(ShardTensor, Shape)>;
using DimPatch = Patch<ShardTensor(ShardTensor, int)>;

bool no_partial(const ShardTensor& x) { return !x.spec().any_partial(); }

int64_t product(const Shape& s, size_t begin, size_t end) {
  return std::accumulate(s.begin() + static_cast<std::ptrdiff_t>(begin), s.begin() + static_cast<std::ptrdiff_t>(end),
                         int64_t{1}, std::multiplies<>());
}

// `shape` with a -1 entry resolved against `numel`; ShapeError naming `op` when it cannot hold numel elements.
Shape resolve_shape(const char* op, Shape shape, int64_t numel) {
  int64_t known = 1;
  int infer = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] != -1) {
      known *= shape[k];
      continue;
    }
    SHARDRT_CHECK(infer < 0, ShapeError, op, ": more than one -1 in ", shape_str(shape));
    infer = static_cast<int>(k);
  }
  if (infer >= 0 && known != 0) shape[static_cast<size_t>(infer)] = numel / known;
  SHARDRT_CHECK(product(shape, 0, shape.size()) == numel, ShapeError, op, ": cannot reshape ", numel, " elements into ",
                shape_str(shape));
  return shape;
}

// Where sharded dim d of `from` goes in `to`: the dim it becomes and the factor its extents take (multiplied by
// `mul` when unsharded dims after it merge into it, divided by `div` when it splits into it and trailing dims).
struct DimMove {
  int to = -1;
  int64_t mul = 1, div = 1;
};

// `sharded_after(d, j)`: some dim in (d, j) of `from` is sharded (merging it would interleave ranks' blocks).
template <typename ShardedAfter>
DimMove move_of(const Shape& from, int d, const Shape& to, ShardedAfter sharded_after) {
  const auto ud = static_cast<size_t>(d);
  const int64_t lead = product(from, 0, ud), trail = product(from, ud + 1, from.size());
  // Whole first (a size-1 dim before it in `to` must not turn it into a split), then merges, then splits.
  for (size_t k = 0; k < to.size(); ++k)
    if (product(to, 0, k) == lead && to[k] == from[ud] && product(to, k + 1, to.size()) == trail)
      return {static_cast<int>(k), 1, 1};
  for (size_t k = 0; k < to.size(); ++k) {
    if (product(to, 0, k) != lead) continue;
    // merge: to[k] = from[d] * from[d+1] * ... * from[j-1]
    for (size_t j = ud + 2; j <= from.size(); ++j)
      if (to[k] == product(from, ud, j) && !sharded_after(d, static_cast<int>(j)))
        return {static_cast<int>(k), product(from, ud + 1, j), 1};
  }
  for (size_t k = 0; k < to.size(); ++k) {
    if (product(to, 0, k) != lead || to[k] == 1) continue;
    // split: from[d] = to[k] * to[k+1] * ... * to[j-1]
    for (size_t j = k + 2; j <= to.size(); ++j)
      if (from[ud] == product(to, k, j)) return {static_cast<int>(k), 1, product(to, k + 1, j)};
  }
  return {};
}

// The moves of x's sharded dims into `to`; nullopt when some sharded dim has no exact move (or is sharded by
// several mesh axes, or some extent does not divide by a split's trailing product).
std::optional<std::vector<DimMove>> sharded_moves(const ShardSpec& s, const Shape& to) {
  std::vector<DimMove> moves(static_cast<size_t>(s.ndim()));
  const Shape& from = s.global_shape();
  auto sharded_after = [&](int d, int j) {
    for (int e = d + 1; e < j; ++e)
      if (s.axis_sharding(e) >= 0) return true;
    return false;
  };
  std::vector<int> axes_of_dim(static_cast<size_t>(s.ndim()), 0);
  for (int m : patch::shard_axes(s)) ++axes_of_dim[static_cast<size_t>(s.placement(m).dim)];
  for (int m : patch::shard_axes(s)) {
    const int d = s.placement(m).dim;
    DimMove mv = move_of(from, d, to, sharded_after);
    if (mv.to < 0) return std::nullopt;
    if ((mv.mul != 1 || mv.div != 1) && axes_of_dim[static_cast<size_t>(d)] > 1) return std::nullopt;
    for (int64_t e : s.extents(m))
      if (e % mv.div != 0) return std::nullopt;
    moves[static_cast<size_t>(d)] = mv;
  }
  return moves;
}

// Where each dim goes (old dim -> new dim) for the ops that move dims without changing their sizes.
using DimMap = std::vector<int>;

// x's spec with its sharded dims moved by `moved` and a new global shape; extents travel with their dims.
ShardSpec renumbered(const char* op, const ShardSpec& s, const DimMap& moved, const Shape& global) {
  Placements placements = s.placements();
  for (Placement& p : placements)
    if (p.is_shard()) p = Placement::Shard(moved[static_cast<size_t>(p.dim)]);
  return s.with(placements, global, s.all_extents(), op);
}

// ---- reshape, view -------------------------------------------------------------------------------------------

ReshapePatch reshape_patch(const char* op, LocalReshape local_op) {
  auto target = [op](const ShardTensor& x, const Shape& shape) {
    return resolve_shape(op, shape, shape_numel(x.global_shape()));
  };
  auto accepts = [target](const ShardTensor& x, const Shape& shape) {
    return no_partial(x) && sharded_moves(x.spec(), target(x, shape)).has_value();
  };
  auto run = [op, target, local_op](const ShardTensor& x, const Shape& shape) {
    const Shape to = target(x, shape);
    const std::vector<DimMove> moves = *sharded_moves(x.spec(), to);
    const ShardSpec& s = x.spec();
    Placements placements = s.placements();
    AxisExtents extents = s.all_extents();
    for (int m : patch::shard_axes(s)) {
      const DimMove& mv = moves[static_cast<size_t>(s.placement(m).dim)];
      placements[static_cast<size_t>(m)] = Placement::Shard(mv.to);
      for (int64_t& e : extents[static_cast<size_t>(m)]) e = e * mv.mul / mv.div;
    }
    const ShardSpec spec = s.with(placements, to, extents, op);
    return ShardTensor(local_op(x.local(), spec.local_shape()), spec);
  };
  return {"reshape/sharded-dims-whole-merged-or-split", accepts, run};
}

Tensor local_reshape(const Tensor& x, const Shape& s) { return reshape(x, s); }
Tensor local_view(const Tensor& x, const Shape& s) { return view(x, s); }

// ---- permute, transpose, unsqueeze -------------------------------------------------------------------------

bool any_placements(const ShardTensor& x, int) { return no_partial(x); }

ShardTensor permute_run(const ShardTensor& x, const std::vector<int>& dims) {
  const Tensor y = permute(x.local(), dims);  // validates dims as a permutation
  DimMap moved(dims.size());
  Shape global(dims.size());
  for (size_t k = 0; k < dims.size(); ++k) {
    const auto from = static_cast<size_t>(wrap_dim(dims[k], x.dim(), "permute"));
    moved[from] = static_cast<int>(k);
    global[k] = x.global_shape()[from];
  }
  return ShardTensor(y, renumbered("permute", x.spec(), moved, global));
}

ShardTensor transpose_run(const ShardTensor& x, int d0, int d1) {
  const Tensor y = transpose(x.local(), d0, d1);  // validates the dims
  const int a = wrap_dim(d0, x.dim(), "transpose"), b = wrap_dim(d1, x.dim(), "transpose");
  Shape global = x.global_shape();
  std::swap(global[static_cast<size_t>(a)], global[static_cast<size_t>(b)]);
  DimMap moved(static_cast<size_t>(x.dim()));
  std::iota(moved.begin(), moved.end(), 0);
  std::swap(moved[static_cast<size_t>(a)], moved[static_cast<size_t>(b)]);
  return ShardTensor(y, renumbered("transpose", x.spec(), moved, global));
}

ShardTensor unsqueeze_run(const ShardTensor& x, int dim) {
  const Tensor y = unsqueeze(x.local(), dim);  // validates dim
  const int at = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape global = x.global_shape();
  global.insert(global.begin() + at, 1);
  DimMap moved(static_cast<size_t>(x.dim()));
  for (int d = 0; d < x.dim(); ++d) moved[static_cast<size_t>(d)] = d >= at ? d + 1 : d;
  return ShardTensor(y, renumbered("unsqueeze", x.spec(), moved, global));
}

// ---- dims removed: squeeze, select ----------------------------------------------------------------------------

// Squeeze and select remove dim `dim`, which must not be sharded.
bool removes_unsharded_dim(const char* op, const ShardTensor& x, int dim) {
  return no_partial(x) && x.spec().axis_sharding(wrap_dim(dim, x.dim(), op)) < 0;
}
bool squeeze_accepts(const ShardTensor& x, int dim) { return removes_unsharded_dim("squeeze", x, dim); }
bool select_accepts(const ShardTensor& x, int dim, int64_t) { return removes_unsharded_dim("select", x, dim); }

// x's spec without dim `removed` (an unsharded one).
ShardSpec without_dim(const char* op, const ShardSpec& s, int removed) {
  Shape global = s.global_shape();
  global.erase(global.begin() + removed);
  DimMap moved(static_cast<size_t>(s.ndim()));
  for (int d = 0; d < s.ndim(); ++d) moved[static_cast<size_t>(d)] = d > removed ? d - 1 : d;
  return renumbered(op, s, moved, global);
}

ShardTensor squeeze_run(const ShardTensor& x, int dim) {
  const Tensor y = squeeze(x.local(), dim);  // the dim is unsharded: its local size is the global one
  return ShardTensor(y, without_dim("squeeze", x.spec(), wrap_dim(dim, x.dim(), "squeeze")));
}

ShardTensor select_run(const ShardTensor& x, int dim, int64_t index) {
  const Tensor y = select(x.local(), dim, index);  // the dim is unsharded: the index is global and local
  return ShardTensor(y, without_dim("select", x.spec(), wrap_dim(dim, x.dim(), "select")));
}

// ---- cat ----------------------------------------------------------------------------------------------------

bool cat_accepts(const std::vector<ShardTensor>& xs, int dim) {
  const ShardSpec& s = xs.front().spec();
  if (s.any_partial() || s.axis_sharding(wrap_dim(dim, s.ndim(), "cat")) >= 0) return false;
  for (const ShardTensor& x : xs) {
    if (!same_mesh(x.mesh(), s.mesh()) || x.placements() != s.placements()) return false;
    for (int m = 0; m < s.mesh().ndim(); ++m)
      if (!extents_alignable(xs.front(), x, m)) return false;
  }
  return true;
}

ShardTensor cat_run(const std::vector<ShardTensor>& xs, int dim) {
  std::vector<Tensor> locals;
  for (const ShardTensor& x : xs) locals.push_back(align_extents("cat", xs.front(), x).local());
  const Tensor y = cat(locals, dim);  // validates the shapes: unsharded dims are whole, sharded ones match
  const ShardSpec& s = xs.front().spec();
  const int d = wrap_dim(dim, s.ndim(), "cat");
  Shape global = s.global_shape();
  global[static_cast<size_t>(d)] = y.size(d);
  return ShardTensor(y, s.with(s.placements(), global, s.all_extents(), "cat"));
}

// ---- split, expand ------------------------------------------------------------------------------------------

bool split_accepts(const ShardTensor& x, const std::vector<int64_t>&, int dim) {
  return removes_unsharded_dim("split", x, dim);
}

std::vector<ShardTensor> split_run(const ShardTensor& x, const std::vector<int64_t>& sizes, int dim) {
  const std::vector<Tensor> parts = split(x.local(), sizes, dim);  // the dim is unsharded: sizes are local too
  const int d = wrap_dim(dim, x.dim(), "split");
  std::vector<ShardTensor> out;
  for (size_t k = 0; k < parts.size(); ++k) {
    Shape global = x.global_shape();
    global[static_cast<size_t>(d)] = sizes[k];
    out.emplace_back(parts[k], x.spec().with(x.placements(), global, x.spec().all_extents(), "split"));
  }
  return out;
}

// The number of new leading dims expand puts in front of x's.
int64_t expand_lead(const ShardTensor& x, const Shape& shape) {
  return static_cast<int64_t>(shape.size()) - x.dim();
}

bool expand_accepts(const ShardTensor& x, const Shape& shape) {
  if (!no_partial(x)) return false;
  const int64_t lead = expand_lead(x, shape);
  for (int m : patch::shard_axes(x.spec())) {
    const int d = x.spec().placement(m).dim;
    const int64_t want = shape[static_cast<size_t>(lead + d)];
    if (want != -1 && want != x.global_shape()[d]) return false;
  }
  return true;
}

ShardTensor expand_run(const ShardTensor& x, const Shape& shape) {
  const Shape global = patch::global_stand_in(x).expand(shape).shape();
  const int64_t lead = expand_lead(x, shape);
  Shape local = global;  // the sharded dims at their local extents
  DimMap moved(static_cast<size_t>(x.dim()));
  for (int d = 0; d < x.dim(); ++d) {
    moved[static_cast<size_t>(d)] = static_cast<int>(lead + d);
    if (x.spec().axis_sharding(d) >= 0) local[static_cast<size_t>(lead + d)] = x.local().size(d);
  }
  return ShardTensor(expand(x.local(), local), renumbered("expand", x.spec(), moved, global));
}

}  // namespace

ShardTensor reshape(const ShardTensor& x, const Shape& global_shape) {
  static const std::vector<ReshapePatch> table = {reshape_patch("reshape", local_reshape)};
  return dispatch_patch("reshape", table, {&x}, x, global_shape);
}

ShardTensor view(const ShardTensor& x, const Shape& global_shape) {
  static const std::vector<ReshapePatch> table = {reshape_patch("view", local_view)};
  return dispatch_patch("view", table, {&x}, x, global_shape);
}

ShardTensor permute(const ShardTensor& x, const std::vector<int>& dims) {
  using PermutePatch = Patch<ShardTensor(ShardTensor, std::vector<int>)>;
  static const std::vector<PermutePatch> table = {
      {"permute/any", [](const ShardTensor& t, const std::vector<int>&) { return no_partial(t); }, permute_run}};
  return dispatch_patch("permute", table, {&x}, x, dims);
}

ShardTensor transpose(const ShardTensor& x, int d0, int d1) {
  using TransposePatch = Patch<ShardTensor(ShardTensor, int, int)>;
  static const std::vector<TransposePatch> table = {
      {"transpose/any", [](const ShardTensor& t, int, int) { return no_partial(t); }, transpose_run}};
  return dispatch_patch("transpose", table, {&x}, x, d0, d1);
}

ShardTensor unsqueeze(const ShardTensor& x, int dim) {
  static const std::vector<DimPatch> table = {{"unsqueeze/any", any_placements, unsqueeze_run}};
  return dispatch_patch("unsqueeze", table, {&x}, x, dim);
}

ShardTensor squeeze(const ShardTensor& x, int dim) {
  static const std::vector<DimPatch> table = {{"squeeze/unsharded-dim", squeeze_accepts, squeeze_run}};
  return dispatch_patch("squeeze", table, {&x}, x, dim);
}

ShardTensor select(const ShardTensor& x, int dim, int64_t index) {
  using SelectPatch = Patch<ShardTensor(ShardTensor, int, int64_t)>;
  static const std::vector<SelectPatch> table = {{"select/unsharded-dim", select_accepts, select_run}};
  return dispatch_patch("select", table, {&x}, x, dim, index);
}

ShardTensor expand(const ShardTensor& x, const Shape& shape) {
  static const std::vector<ReshapePatch> table = {{"expand/unsharded-dims-broadcast", expand_accepts, expand_run}};
  (void)patch::global_stand_in(x).expand(shape);  // the local op's shape checks, for the global tensor
  return dispatch_patch("expand", table, {&x}, x, shape);
}

std::vector<ShardTensor> split(const ShardTensor& x, const std::vector<int64_t>& sizes, int dim) {
  using SplitPatch = Patch<std::vector<ShardTensor>(ShardTensor, std::vector<int64_t>, int)>;
  static const std::vector<SplitPatch> table = {{"split/unsharded-dim", split_accepts, split_run}};
  {
    NoGradGuard no_grad;  // the local op's argument checks, for the global tensor; the parts are views, dropped
    (void)split(patch::global_stand_in(x), sizes, dim);
  }
  return dispatch_patch("split", table, {&x}, x, sizes, dim);
}

ShardTensor cat(const std::vector<ShardTensor>& xs, int dim) {
  using CatPatch = Patch<ShardTensor(std::vector<ShardTensor>, int)>;
  SHARDRT_CHECK(!xs.empty(), ShapeError, "cat: no tensors given");
  static const std::vector<CatPatch> table = {{"cat/unsharded-dim", cat_accepts, cat_run}};
  std::vector<const ShardTensor*> described;
  for (const ShardTensor& x : xs) described.push_back(&x);
  return dispatch_patch("cat", table, described, xs, dim);
}

}  // namespace shardrt
