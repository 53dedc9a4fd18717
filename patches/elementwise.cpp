// Sharded elementwise ops and activations.
//
// Accepted placements (no Partial anywhere: an elementwise op of a pending sum is not the sum of the ops):
//   unary (neg, exp, tanh, relu, gelu, silu, sigmoid, add_scalar, mul_scalar): any Shard/Replicate placements.
//   binary a op b, NumPy broadcasting of the GLOBAL shapes; a plain Tensor operand is Replicate on every axis.
//   Per mesh axis:
//     both Replicate                                            -> Replicate
//     both Shard of the same output dim                          -> Shard(that dim); with different extents
//       (the same global size), b is first redistributed to a's (patches/align.h: one all_to_all_v on the axis
//       forward and backward, or MissingShardPatch under the strict policy)
//     one Shard(d) (output dim D), the other Replicate and broadcasting over D (size 1 there, or no such dim)
//                                                               -> Shard(D)
//   Anything else (Partial; Shard of different dims; a replicated operand with the full extent along the sharded
//   dim, which would need slicing) -> MissingShardPatch.
// Output: the placements above; global shape = the broadcast of the global shapes; per-rank extents = those of
//   the sharded operand on each axis. The per-axis rule makes the LOCAL shapes broadcast to exactly the local
//   output, so the local op runs unchanged.
// Forward collectives: none (but b's alignment above).
// Backward collectives: an operand that is Replicate on axes where the other is Shard, and requires grad, has a
//   grad that is partial over those axes (its elements met only this rank's shard): one all_reduce (sum, in
//   >= f32) of that operand's grad per such axis, under "<op>.backward", bytes = numel * max(4, itemsize) * (P-1).
//   On any one axis only one operand can be in that position.
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

ShardTensor binary_run(const char* op, LocalBinary f, const ShardTensor& a, const ShardTensor& b_given) {
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
  const Tensor la = reduce_grads_over(op, mesh, a_partial_axes, {a.local()})[0];
  const Tensor lb = reduce_grads_over(op, mesh, b_partial_axes, {b.local()})[0];
  return ShardTensor(f(la, lb), ShardSpec(mesh, placements, out_shape, extents));
}

ShardTensor binary(const char* op, LocalBinary f, const ShardTensor& a, const ShardTensor& b) {
  const std::vector<BinaryPatch> table = {{"elementwise/broadcast-replicated", binary_accepts,
                                           [&](ShardTensor x, ShardTensor y) { return binary_run(op, f, x, y); }}};
  return dispatch_patch(op, table, {&a, &b}, a, b);
}

// The local ops, named unambiguously (the ShardTensor overloads share their names).
Tensor local_add(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor local_sub(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor local_mul(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor local_div(const Tensor& a, const Tensor& b) { return div(a, b); }

}  // namespace

ShardTensor add(const ShardTensor& a, const ShardTensor& b) { return binary("add", local_add, a, b); }
ShardTensor sub(const ShardTensor& a, const ShardTensor& b) { return binary("sub", local_sub, a, b); }
ShardTensor mul(const ShardTensor& a, const ShardTensor& b) { return binary("mul", local_mul, a, b); }
ShardTensor div(const ShardTensor& a, const ShardTensor& b) { return binary("div", local_div, a, b); }
ShardTensor add(const ShardTensor& a, const Tensor& b) {
  return binary("add", local_add, a, patch::replicated(b, a.mesh()));
}
ShardTensor mul(const ShardTensor& a, const Tensor& b) {
  return binary("mul", local_mul, a, patch::replicated(b, a.mesh()));
}

ShardTensor add_scalar(const ShardTensor& x, double s) {
  return unary("add_scalar", x, [s](const Tensor& t) { return add_scalar(t, s); });
}
ShardTensor mul_scalar(const ShardTensor& x, double s) {
  return unary("mul_scalar", x, [s](const Tensor& t) { return mul_scalar(t, s); });
}
ShardTensor neg(const ShardTensor& x) {
  return unary("neg", x, [](const Tensor& t) { return neg(t); });
}
ShardTensor exp(const ShardTensor& x) {
  return unary("exp", x, [](const Tensor& t) { return exp(t); });
}
ShardTensor tanh(const ShardTensor& x) {
  return unary("tanh", x, [](const Tensor& t) { return tanh(t); });
}
ShardTensor relu(const ShardTensor& x) {
  return unary("relu", x, [](const Tensor& t) { return relu(t); });
}
ShardTensor gelu(const ShardTensor& x, GeluApprox approx) {
  return unary("gelu", x, [approx](const Tensor& t) { return gelu(t, approx); });
}
ShardTensor silu(const ShardTensor& x) {
  return unary("silu", x, [](const Tensor& t) { return silu(t); });
}
ShardTensor sigmoid(const ShardTensor& x) {
  return unary("sigmoid", x, [](const Tensor& t) { return sigmoid(t); });
}

}  // namespace shardrt
