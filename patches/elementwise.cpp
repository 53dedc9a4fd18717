// Sharded elementwise ops, activations, comparisons and where.
//
// Accepted placements (no Partial anywhere: an elementwise op of a pending sum is not the sum of the ops):
//   unary (neg, exp, log, sqrt, rsqrt, tanh, erf, abs, relu, gelu, silu, sigmoid, add_scalar, mul_scalar,
//     pow_scalar, clamp, to_dtype): any Shard/Replicate placements; the output keeps x's spec.
//   binary a op b (add, sub, mul, div, pow, maximum, minimum; comparisons eq, ne, lt, le, gt, ge), NumPy
//   broadcasting of the GLOBAL shapes; a plain Tensor operand, on either side, is Replicate on every axis.
//   Per mesh axis:
//     both Replicate                                            -> Replicate
//     both Shard of the same output dim                          -> Shard(that dim); with different extents
//       (the same global size), b is first redistributed to a's (patches/align.h: one all_to_all_v on the axis
//       forward and backward, or MissingShardPatch under the strict policy)
//     one Shard(d) (output dim D), the other Replicate and broadcasting over D (size 1 there, or no such dim)
//                                                               -> Shard(D)
//   Anything else (Partial; Shard of different dims; a replicated operand with the full extent along the sharded
//   dim, which would need slicing) -> MissingShardPatch.
//   where(cond, a, b): the same rule over the three operands — on each axis every sharded operand shards the same
//   output dim, and every replicated one broadcasts over it; a and b with other extents are aligned first (to
//   cond's, else b to a's).
// Output: the placements above; global shape = the broadcast of the global shapes; per-rank extents = those of
//   the sharded operand on each axis. The per-axis rule makes the LOCAL shapes broadcast to exactly the local
//   output, so the local op runs unchanged. Comparisons give u8 with no grad; where's grads go to a and b.
// Forward collectives: none (but b's alignment above).
// Backward collectives: an operand that is Replicate on axes where another is Shard, and requires grad, has a
//   grad that is partial over those axes (its elements met only this rank's shard): one all_reduce (sum, in
//   >= f32) of that operand's grad per such axis, under "<op>.backward", bytes = numel * max(4, itemsize) * (P-1).
//   In a binary op only one operand can be in that position on any one axis; in where, a and b may both be
//   (a replicated a and b against a sharded cond): their grads are packed into one all_reduce per axis.
//   Comparisons: no backward.
// Saved for backward per rank: what the local op saves — its local operands, O(N/P) for sharded ones; the grad
//   reduction saves nothing.
#include <algorithm>
#include <functional>

#include "patches/align.h"
#include "patches/dispatch.h"
#include "patches/ops.h"
#include "patches/patch_util.h"

namespace shardrt {

namespace {

using patch::reduce_grads_over;

using UnaryPatch = Patch<ShardTensor(ShardTensor)>;
using BinaryPatch = Patch<ShardTensor(ShardTensor, ShardTensor)>;
using LocalUnary = std::function<Tensor(const Tensor&)>;
using LocalBinary = Tensor (*)(const Tensor&, const Tensor&);

bool no_partial(const ShardTensor& x) { return !x.spec().any_partial(); }

ShardTensor unary(const char* op, const ShardTensor& x, const LocalUnary& f) {
  const std::vector<UnaryPatch> table = {
      {"elementwise/unary", no_partial, [&](const ShardTensor& t) { return ShardTensor(f(t.local()), t.spec()); }}};
  return dispatch_patch(op, table, {&x}, x);
}

// The output dim that dim d of an n-dim operand lands on when broadcast to out_ndim dims.
int out_dim(int d, int ndim, int out_ndim) { return d + out_ndim - ndim; }

// Whether `r` broadcasts over output dim D: it has no such dim, or size 1 there.
bool broadcasts_over(const ShardTensor& r, int D, int out_ndim) {
  const int k = D - (out_ndim - r.dim());
  return k < 0 || r.global_shape()[k] == 1;
}

bool binary_accepts(const ShardTensor& a, const ShardTensor& b) {
  if (!same_mesh(a.mesh(), b.mesh()) || a.spec().any_partial() || b.spec().any_partial()) return false;
  const int nd = std::max(a.dim(), b.dim());
  for (int m = 0; m < a.mesh().ndim(); ++m) {
    const Placement& pa = a.spec().placement(m);
    const Placement& pb = b.spec().placement(m);
    if (pa.is_shard() && pb.is_shard()) {
      if (out_dim(pa.dim, a.dim(), nd) != out_dim(pb.dim, b.dim(), nd) || !extents_alignable(a, b, m)) return false;
    } else if (pa.is_shard()) {
      if (!broadcasts_over(b, out_dim(pa.dim, a.dim(), nd), nd)) return false;
    } else if (pb.is_shard()) {
      if (!broadcasts_over(a, out_dim(pb.dim, b.dim(), nd), nd)) return false;
    }
  }
  return true;
}

using patch::PlainOperand;

ShardTensor binary_run(const char* op, LocalBinary f, const ShardTensor& a, const ShardTensor& b_given,
                       PlainOperand plain = PlainOperand::none) {
  const ShardTensor b = align_extents(op, a, b_given);  // a caller decomposition of b: b moves to a's extents
  const Mesh& mesh = a.mesh();
  const int nd = std::max(a.dim(), b.dim());
  const Shape out_shape = broadcast_shapes(a.global_shape(), b.global_shape(), op);
  Placements placements(static_cast<size_t>(mesh.ndim()), Placement::Replicate());
  auto extents = patch::no_extents(mesh);
  std::vector<int> a_partial_axes, b_partial_axes;  // axes over which each operand's grad is partial
  for (int m = 0; m < mesh.ndim(); ++m) {
    const Placement& pa = a.spec().placement(m);
    const Placement& pb = b.spec().placement(m);
    if (pa.is_shard()) {
      placements[m] = Placement::Shard(out_dim(pa.dim, a.dim(), nd));
      extents[m] = a.spec().extents(m);
      if (!pb.is_shard()) b_partial_axes.push_back(m);
    } else if (pb.is_shard()) {
      placements[m] = Placement::Shard(out_dim(pb.dim, b.dim(), nd));
      extents[m] = b.spec().extents(m);
      a_partial_axes.push_back(m);
    }
  }
  const Tensor la = plain == PlainOperand::a ? patch::reduce_param_grads(op, b.spec(), {a.local()})[0]
                                             : reduce_grads_over(op, mesh, a_partial_axes, {a.local()})[0];
  const Tensor lb = plain == PlainOperand::b ? patch::reduce_param_grads(op, a.spec(), {b.local()})[0]
                                             : reduce_grads_over(op, mesh, b_partial_axes, {b.local()})[0];
  return ShardTensor(f(la, lb), ShardSpec(mesh, placements, out_shape, extents));
}

ShardTensor binary(const char* op, LocalBinary f, const ShardTensor& a, const ShardTensor& b,
                   PlainOperand plain = PlainOperand::none) {
  const std::vector<BinaryPatch> table = {
      {"elementwise/broadcast-replicated", binary_accepts,
       [&](ShardTensor x, ShardTensor y) { return binary_run(op, f, x, y, plain); }}};
  return dispatch_patch(op, table, {&a, &b}, a, b);
}

// The local ops, named unambiguously (the ShardTensor overloads share their names).
Tensor local_add(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor local_sub(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor local_mul(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor local_div(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor local_pow(const Tensor& a, const Tensor& b) { return pow(a, b); }
Tensor local_maximum(const Tensor& a, const Tensor& b) { return maximum(a, b); }
Tensor local_minimum(const Tensor& a, const Tensor& b) { return minimum(a, b); }
Tensor local_eq(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor local_ne(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor local_lt(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor local_le(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor local_gt(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor local_ge(const Tensor& a, const Tensor& b) { return ge(a, b); }

// Comparisons carry no grad: their operands enter detached, so binary_run records no grad reduction for them.
ShardTensor detached(const ShardTensor& x) { return ShardTensor(x.local().detach(), x.spec()); }
ShardTensor compare(const char* op, LocalBinary f, const ShardTensor& a, const ShardTensor& b, PlainOperand = {}) {
  const ShardTensor da = detached(a), db = detached(b);
  return binary(op, f, da, db);
}

// ---- where ----------------------------------------------------------------------------------------------------

// What the operands of an n-ary elementwise op do on one mesh axis: the output dim their Shard placements land on
// (-1: none shards) with those extents, and whether the rule holds (every sharded operand on the same output dim
// with the same extents, every replicated one broadcasting over it).
struct AxisLayout {
  int dim = -1;
  Extents extents;
  bool ok = true;
};

AxisLayout axis_layout(const std::vector<const ShardTensor*>& xs, int m, int nd) {
  AxisLayout l;
  for (const ShardTensor* x : xs) {
    const Placement& p = x->spec().placement(m);
    if (!p.is_shard()) continue;
    const int D = out_dim(p.dim, x->dim(), nd);
    if (l.dim < 0) {
      l.dim = D;
      l.extents = x->spec().extents(m);
    } else if (D != l.dim || x->spec().extents(m) != l.extents) {
      l.ok = false;
    }
  }
  if (l.dim >= 0)
    for (const ShardTensor* x : xs)
      if (!x->spec().placement(m).is_shard() && !broadcasts_over(*x, l.dim, nd)) l.ok = false;
  return l;
}

int max_dim(const std::vector<const ShardTensor*>& xs) {
  int nd = 0;
  for (const ShardTensor* x : xs) nd = std::max(nd, x->dim());
  return nd;
}

bool where_accepts(const ShardTensor& c, const ShardTensor& a, const ShardTensor& b) {
  const std::vector<const ShardTensor*> xs = {&c, &a, &b};
  for (const ShardTensor* x : xs)
    if (!same_mesh(x->mesh(), c.mesh()) || x->spec().any_partial()) return false;
  for (int m = 0; m < c.mesh().ndim(); ++m)
    if (!axis_layout(xs, m, max_dim(xs)).ok) return false;
  return true;
}

ShardTensor where_run(const ShardTensor& c, const ShardTensor& a, const ShardTensor& b) {
  const Mesh& mesh = c.mesh();
  const std::vector<const ShardTensor*> xs = {&c, &a, &b};
  const Shape out_shape =
      broadcast_shapes(broadcast_shapes(c.global_shape(), a.global_shape(), "where"), b.global_shape(), "where");
  Placements placements(static_cast<size_t>(mesh.ndim()), Placement::Replicate());
  auto extents = patch::no_extents(mesh);
  std::vector<int> both_axes, a_axes, b_axes;  // axes over which a's and b's grads are partial
  for (int m = 0; m < mesh.ndim(); ++m) {
    const AxisLayout l = axis_layout(xs, m, max_dim(xs));
    if (l.dim < 0) continue;
    placements[m] = Placement::Shard(l.dim);
    extents[m] = l.extents;
    const bool a_rep = !a.spec().placement(m).is_shard(), b_rep = !b.spec().placement(m).is_shard();
    if (a_rep && b_rep) both_axes.push_back(m);
    else if (a_rep) a_axes.push_back(m);
    else if (b_rep) b_axes.push_back(m);
  }
  // One packed reduction on the axes where both are replicated (a sharded cond), one each elsewhere.
  std::vector<Tensor> ab = reduce_grads_over("where", mesh, both_axes, {a.local(), b.local()});
  const Tensor la = reduce_grads_over("where", mesh, a_axes, {ab[0]})[0];
  const Tensor lb = reduce_grads_over("where", mesh, b_axes, {ab[1]})[0];
  return ShardTensor(where(c.local(), la, lb), ShardSpec(mesh, placements, out_shape, extents));
}

}  // namespace

// A plain Tensor operand, on either side, is a parameter: Replicate on every axis of the other operand's mesh,
// its grad reduced by the parameter rule.
#define SHARDRT_SHARDED_BINARY(name, run)                                                                    \
  ShardTensor name(const ShardTensor& a, const ShardTensor& b) { return run(#name, local_##name, a, b); } \
  ShardTensor name(const ShardTensor& a, const Tensor& b) {                                               \
    return run(#name, local_##name, a, patch::replicated(b, a.mesh()), PlainOperand::b);                  \
  }                                                                                                       \
  ShardTensor name(const Tensor& a, const ShardTensor& b) {                                               \
    return run(#name, local_##name, patch::replicated(a, b.mesh()), b, PlainOperand::a);                  \
  }
SHARDRT_SHARDED_BINARY(add, binary)
SHARDRT_SHARDED_BINARY(sub, binary)
SHARDRT_SHARDED_BINARY(mul, binary)
SHARDRT_SHARDED_BINARY(div, binary)
SHARDRT_SHARDED_BINARY(pow, binary)
SHARDRT_SHARDED_BINARY(maximum, binary)
SHARDRT_SHARDED_BINARY(minimum, binary)
SHARDRT_SHARDED_BINARY(eq, compare)
SHARDRT_SHARDED_BINARY(ne, compare)
SHARDRT_SHARDED_BINARY(lt, compare)
SHARDRT_SHARDED_BINARY(le, compare)
SHARDRT_SHARDED_BINARY(gt, compare)
SHARDRT_SHARDED_BINARY(ge, compare)
#undef SHARDRT_SHARDED_BINARY

ShardTensor where(const ShardTensor& cond, const ShardTensor& a, const ShardTensor& b) {
  using WherePatch = Patch<ShardTensor(ShardTensor, ShardTensor, ShardTensor)>;
  static const std::vector<WherePatch> table = {{"where/broadcast-replicated", where_accepts, where_run}};
  // Shapes that do not broadcast are a ShapeError before any placement is looked at.
  (void)broadcast_shapes(broadcast_shapes(cond.global_shape(), a.global_shape(), "where"), b.global_shape(), "where");
  // Caller decompositions (patches/align.h): a and b move to cond's extents where they shard the same dim, then b
  // to a's where cond does not shard it; one all_to_all_v per moved operand and axis, none when the extents agree.
  const ShardTensor a_aligned = align_extents("where", cond, a);
  const ShardTensor b_aligned = align_extents("where", a_aligned, align_extents("where", cond, b));
  return dispatch_patch("where", table, {&cond, &a, &b}, cond, a_aligned, b_aligned);
}
ShardTensor where(const ShardTensor& cond, const ShardTensor& a, const Tensor& b) {
  return where(cond, a, patch::replicated(b, cond.mesh()));
}
ShardTensor where(const ShardTensor& cond, const Tensor& a, const ShardTensor& b) {
  return where(cond, patch::replicated(a, cond.mesh()), b);
}

ShardTensor add_scalar(const ShardTensor& x, double s) {
  return unary("add_scalar", x, [s](const Tensor& t) { return add_scalar(t, s); });
}
ShardTensor mul_scalar(const ShardTensor& x, double s) {
  return unary("mul_scalar", x, [s](const Tensor& t) { return mul_scalar(t, s); });
}
ShardTensor pow_scalar(const ShardTensor& x, double p) {
  return unary("pow_scalar", x, [p](const Tensor& t) { return pow_scalar(t, p); });
}
ShardTensor clamp(const ShardTensor& x, double lo, double hi) {
  return unary("clamp", x, [lo, hi](const Tensor& t) { return clamp(t, lo, hi); });
}
ShardTensor to_dtype(const ShardTensor& x, DType dtype) {
  return unary("to_dtype", x, [dtype](const Tensor& t) { return to_dtype(t, dtype); });
}
ShardTensor gelu(const ShardTensor& x, GeluApprox approx) {
  return unary("gelu", x, [approx](const Tensor& t) { return gelu(t, approx); });
}

// The unary ops without arguments.
#define SHARDRT_SHARDED_UNARY(name) \
  ShardTensor name(const ShardTensor& x) { \
    return unary(#name, x, [](const Tensor& t) { return name(t); }); \
  }
SHARDRT_SHARDED_UNARY(neg)
SHARDRT_SHARDED_UNARY(exp)
SHARDRT_SHARDED_UNARY(log)
SHARDRT_SHARDED_UNARY(sqrt)
SHARDRT_SHARDED_UNARY(rsqrt)
SHARDRT_SHARDED_UNARY(tanh)
SHARDRT_SHARDED_UNARY(erf)
SHARDRT_SHARDED_UNARY(abs)
SHARDRT_SHARDED_UNARY(relu)
SHARDRT_SHARDED_UNARY(silu)
SHARDRT_SHARDED_UNARY(sigmoid)
#undef SHARDRT_SHARDED_UNARY

}  // namespace shardrt
