// Sharded matmul and bmm: rows of a, columns of b, or batch entries of either sharded; the contraction dim K never.
//
// Accepted placements, per mesh axis (NumPy matmul of the GLOBAL shapes; a plain Tensor operand, on either side,
//   is Replicate on every axis; bmm: both 3-D, (B, M, K) x (B, K, N)):
//     a Replicate, b Replicate                                  -> Replicate
//     a Shard(M) (a's second-to-last dim), b Replicate          -> Shard(the output's M dim), a's extents
//     a Replicate, b Shard(N) (b's last dim, b at least 2-D)    -> Shard(the output's last dim), b's extents
//     one operand Shard(a batch dim, output dim D), the other Replicate and broadcasting over D (size 1 there, or
//       no such dim)                                            -> Shard(D), the sharded operand's extents
//     a and b Shard of the same output batch dim D with equal extents -> Shard(D)
//   Anything else -> MissingShardPatch: Partial; a sharded K (a's last dim, b's second-to-last: the product would
//   be a pending sum); both sharded on one axis unless on the same batch dim; a replicated operand with the whole
//   extent of the other's sharded batch dim (it would need slicing); a 1-D operand sharded (its only dim is K).
//   Rows on one axis and columns on another (2-D meshes) are fine: each axis is planned on its own.
// Arguments: the local op's checks (float dtypes, ranks, inner dims, batch broadcast) run first on stand-ins of
//   the global tensors, so a bad shape is the local op's error for the global tensors, on every rank.
// Output: the placements above; global shape = matmul of the global shapes. Every output row, column and batch
//   entry depends only on the same row of a, column of b and entry of each, so the local op on the local operands
//   gives exactly this rank's window of the output.
// Forward collectives: none.
// Backward collectives: an operand that is Replicate on axes where the other is Shard (of M, N or a batch dim it
//   broadcasts over), and requires grad, has a grad that is a partial sum over those axes (a sum over this rank's
//   rows/columns/entries): one all_reduce (sum, in >= f32) of that operand's grad per such axis, under
//   "<op>.backward", bytes = numel(its local tensor) * max(4, itemsize) * (P-1), via patch::reduce_grads_over
//   (a's first, then b's). Operands sharded alike on a batch dim: local.
// Saved for backward per rank: the local op's — the local operands, O(N/P) for sharded ones.
#include <algorithm>
#include <string>

#include "autograd/ops/common.h"
#include "patches/dispatch.h"
#include "patches/ops.h"
#include "patches/patch_util.h"

namespace shardrt {

namespace {

using MatmulPatch = Patch<ShardTensor(ShardTensor, ShardTensor)>;
using LocalMatmul = Tensor (*)(const Tensor&, const Tensor&);

// The batch dims of an operand (all but its last two; none for a 1-D operand).
int batch_ndim(const ShardTensor& t) { return std::max(t.dim() - 2, 0); }

// The output batch dim that batch dim d of t lands on, with `out_batch` output batch dims.
int out_batch_dim(const ShardTensor& t, int d, int out_batch) { return d + out_batch - batch_ndim(t); }

// Whether t broadcasts over output batch dim D: it has no such dim, or size 1 there.
bool broadcasts_over(const ShardTensor& t, int D, int out_batch) {
  const int k = D - (out_batch - batch_ndim(t));
  return k < 0 || t.global_shape()[k] == 1;
}

// What one mesh axis does: the output dim it shards (-1: none) with whose extents, and which operand's grad is
// partial over it.
struct AxisPlan {
  bool ok = true;
  int out_dim = -1;
  const ShardTensor* extents_of = nullptr;
  bool a_partial = false, b_partial = false;
};

AxisPlan plan_axis(const ShardTensor& a, const ShardTensor& b, int m) {
  const int out_batch = std::max(batch_ndim(a), batch_ndim(b));
  const int out_ndim = out_batch + (a.dim() > 1) + (b.dim() > 1);
  const Placement& pa = a.spec().placement(m);
  const Placement& pb = b.spec().placement(m);
  AxisPlan plan;
  if (!pa.is_shard() && !pb.is_shard()) return plan;
  const bool a_batch = pa.is_shard() && pa.dim < batch_ndim(a);
  const bool b_batch = pb.is_shard() && pb.dim < batch_ndim(b);
  if (pa.is_shard() && pb.is_shard()) {  // only the same batch entries on both sides
    plan.ok = a_batch && b_batch && out_batch_dim(a, pa.dim, out_batch) == out_batch_dim(b, pb.dim, out_batch) &&
              a.spec().extents(m) == b.spec().extents(m);
    plan.out_dim = out_batch_dim(a, pa.dim, out_batch);
    plan.extents_of = &a;
  } else if (pa.is_shard()) {
    plan.extents_of = &a;
    plan.b_partial = true;
    if (a_batch) {
      plan.out_dim = out_batch_dim(a, pa.dim, out_batch);
      plan.ok = broadcasts_over(b, plan.out_dim, out_batch);
    } else {  // M, or K (a's last dim; a 1-D a has only K)
      plan.out_dim = out_batch;
      plan.ok = a.dim() >= 2 && pa.dim == a.dim() - 2;
    }
  } else {
    plan.extents_of = &b;
    plan.a_partial = true;
    if (b_batch) {
      plan.out_dim = out_batch_dim(b, pb.dim, out_batch);
      plan.ok = broadcasts_over(a, plan.out_dim, out_batch);
    } else {  // N, or K (b's second-to-last dim; a 1-D b has only K)
      plan.out_dim = out_ndim - 1;
      plan.ok = b.dim() >= 2 && pb.dim == b.dim() - 1;
    }
  }
  return plan;
}

bool matmul_accepts(const ShardTensor& a, const ShardTensor& b) {
  if (!same_mesh(a.mesh(), b.mesh()) || a.spec().any_partial() || b.spec().any_partial()) return false;
  for (int m = 0; m < a.mesh().ndim(); ++m)
    if (!plan_axis(a, b, m).ok) return false;
  return true;
}

using patch::PlainOperand;

ShardTensor matmul_run(const char* op, LocalMatmul f, const ShardTensor& a, const ShardTensor& b,
                       const Shape& out_shape, PlainOperand plain) {
  const Mesh& mesh = a.mesh();
  Placements placements(static_cast<size_t>(mesh.ndim()), Placement::Replicate());
  auto extents = patch::no_extents(mesh);
  std::vector<int> a_partial_axes, b_partial_axes;
  for (int m = 0; m < mesh.ndim(); ++m) {
    const AxisPlan plan = plan_axis(a, b, m);
    if (plan.out_dim < 0) continue;
    placements[m] = Placement::Shard(plan.out_dim);
    extents[m] = plan.extents_of->spec().extents(m);
    if (plan.a_partial) a_partial_axes.push_back(m);
    if (plan.b_partial) b_partial_axes.push_back(m);
  }
  const Tensor la = plain == PlainOperand::a ? patch::reduce_param_grads(op, b.spec(), {a.local()})[0]
                                             : patch::reduce_grads_over(op, mesh, a_partial_axes, {a.local()})[0];
  const Tensor lb = plain == PlainOperand::b ? patch::reduce_param_grads(op, a.spec(), {b.local()})[0]
                                             : patch::reduce_grads_over(op, mesh, b_partial_axes, {b.local()})[0];
  return ShardTensor(f(la, lb), ShardSpec(mesh, placements, out_shape, extents));
}

// The local ops' argument checks (autograd/ops/matmul.cpp), with their messages, on stand-ins of the global
// tensors, before any patch runs: the same error on every rank. Returns the global output shape. (Running the
// local op itself on the stand-ins would materialise the global operands.)
Shape checked_output_shape(const char* op, const ShardTensor& a_in, const ShardTensor& b_in) {
  const Tensor a = patch::global_stand_in(a_in), b = patch::global_stand_in(b_in);
  if (std::string(op) == "bmm")
    SHARDRT_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0), ShapeError,
                  "bmm: expected (B, M, K) x (B, K, N), got ", a.str(), " x ", b.str());
  ops_detail::check_float(op, a, "first operand");
  ops_detail::check_float(op, b, "second operand");
  ops_detail::check_compatible(op, {&a, &b});
  SHARDRT_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, op, ": operands must have rank >= 1, got ", a.str(),
                " and ", b.str());
  const int64_t Kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  SHARDRT_CHECK(a.size(-1) == Kb, ShapeError, op, ": inner dimensions differ: ", a.str(), " x ", b.str());
  const Shape a_batch(a.shape().begin(), a.shape().end() - std::min(a.dim(), 2));
  const Shape b_batch(b.shape().begin(), b.shape().end() - std::min(b.dim(), 2));
  Shape out = ops_detail::broadcast_for(op, {a_batch, b_batch}, {&a, &b});
  if (a.dim() > 1) out.push_back(a.size(-2));
  if (b.dim() > 1) out.push_back(b.size(-1));
  return out;
}

Tensor local_matmul(const Tensor& a, const Tensor& b) { return matmul(a, b); }
Tensor local_bmm(const Tensor& a, const Tensor& b) { return bmm(a, b); }

ShardTensor sharded_product(const char* op, LocalMatmul f, const ShardTensor& a, const ShardTensor& b,
                            PlainOperand plain = PlainOperand::none) {
  const Shape out_shape = checked_output_shape(op, a, b);
  const std::vector<MatmulPatch> table = {
      {"matmul/rows-columns-or-batch-sharded", matmul_accepts,
       [&](const ShardTensor& x, const ShardTensor& y) { return matmul_run(op, f, x, y, out_shape, plain); }}};
  return dispatch_patch(op, table, {&a, &b}, a, b);
}

}  // namespace

ShardTensor matmul(const ShardTensor& a, const ShardTensor& b) { return sharded_product("matmul", local_matmul, a, b); }
ShardTensor matmul(const ShardTensor& a, const Tensor& b) {
  return sharded_product("matmul", local_matmul, a, patch::replicated(b, a.mesh()), PlainOperand::b);
}
ShardTensor matmul(const Tensor& a, const ShardTensor& b) {
  return sharded_product("matmul", local_matmul, patch::replicated(a, b.mesh()), b, PlainOperand::a);
}
ShardTensor bmm(const ShardTensor& a, const ShardTensor& b) { return sharded_product("bmm", local_bmm, a, b); }
ShardTensor bmm(const ShardTensor& a, const Tensor& b) {
  return sharded_product("bmm", local_bmm, a, patch::replicated(b, a.mesh()), PlainOperand::b);
}
ShardTensor bmm(const Tensor& a, const ShardTensor& b) {
  return sharded_product("bmm", local_bmm, patch::replicated(a, b.mesh()), b, PlainOperand::a);
}

}  // namespace shardrt
