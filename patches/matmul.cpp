// Sharded matmul and bmm with sharded rows or batch: a (..., M, K) sharded, b (..., K, N) replicated or sharded
// on the same batch dims.
//
// Accepted placements, per mesh axis (NumPy matmul of the GLOBAL shapes; a plain Tensor b is Replicate on every
//   axis; bmm: both 3-D, (B, M, K) x (B, K, N)):
//     a Replicate, b Replicate                                  -> Replicate
//     a Shard(M) (a's second-to-last dim), b Replicate          -> Shard(the output's M dim)
//     a Shard(a batch dim, output dim D), b Replicate and broadcasting over D (size 1 there, or no such dim)
//                                                               -> Shard(D)
//     a and b Shard of the same output batch dim D with equal extents -> Shard(D)
//   Anything else -> MissingShardPatch: Partial; a sharded contraction dim K (a's last dim, b's K dim: the product
//   would be a pending sum); b's N dim sharded, or b sharded where a is not; a replicated b with the whole extent
//   of a's sharded batch dim (it would need slicing); a 1-D a sharded (its only dim is K).
// Arguments: the local op's checks (float dtypes, ranks, inner dims, batch broadcast) run first on stand-ins of
//   the global tensors, so a bad shape is the local op's error for the global tensors, on every rank.
// Output: the placements above; global shape = matmul of the global shapes; per-rank extents = a's on each axis.
//   Every output row and batch entry depends only on the same row/entry of a (and of b), so the local op on the
//   local operands gives exactly this rank's window of the output.
// Forward collectives: none.
// Backward collectives: a's grad is local (it needs only b and the local grad rows). A b that is Replicate on
//   axes where a is Shard, and requires grad, has a grad that is a partial sum over those axes (a sum over this
//   rank's rows/entries): one all_reduce (sum, in >= f32) of b's grad per such axis, under "<op>.backward",
//   bytes = numel(b) * max(4, itemsize) * (P-1), via patch::reduce_grads_over. b sharded like a: local.
// Saved for backward per rank: the local op's — the local operands, O(N/P) for a, and b (the operand itself).
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

bool matmul_accepts(const ShardTensor& a, const ShardTensor& b) {
  if (!same_mesh(a.mesh(), b.mesh()) || a.spec().any_partial() || b.spec().any_partial()) return false;
  const int out_batch = std::max(batch_ndim(a), batch_ndim(b));
  for (int m = 0; m < a.mesh().ndim(); ++m) {
    const Placement& pa = a.spec().placement(m);
    const Placement& pb = b.spec().placement(m);
    if (!pa.is_shard()) {
      if (pb.is_shard()) return false;  // b sharded where a is not
      continue;
    }
    if (a.dim() < 2 || pa.dim == a.dim() - 1) return false;  // K sharded
    if (pa.dim == a.dim() - 2) {                             // rows
      if (pb.is_shard()) return false;
      continue;
    }
    const int D = out_batch_dim(a, pa.dim, out_batch);
    if (pb.is_shard()) {
      if (pb.dim >= batch_ndim(b) || out_batch_dim(b, pb.dim, out_batch) != D ||
          a.spec().extents(m) != b.spec().extents(m))
        return false;
    } else if (!broadcasts_over(b, D, out_batch)) {
      return false;
    }
  }
  return true;
}

// The spec of the output: a's sharded dims moved to their output positions, a's extents.
ShardSpec output_spec(const ShardTensor& a, const ShardTensor& b, const Shape& out_shape) {
  const int out_batch = std::max(batch_ndim(a), batch_ndim(b));
  Placements placements = a.placements();
  for (Placement& p : placements)
    if (p.is_shard()) p = Placement::Shard(p.dim == a.dim() - 2 ? out_batch : out_batch_dim(a, p.dim, out_batch));
  return ShardSpec(a.mesh(), placements, out_shape, a.spec().all_extents());
}

ShardTensor matmul_run(const char* op, LocalMatmul f, const ShardTensor& a, const ShardTensor& b,
                       const Shape& out_shape) {
  // The axes where b is replicated against a sharded a: b's grad is partial there.
  std::vector<int> b_partial_axes;
  for (int m : patch::shard_axes(a.spec()))
    if (!b.spec().placement(m).is_shard()) b_partial_axes.push_back(m);
  const Tensor lb = patch::reduce_grads_over(op, a.mesh(), b_partial_axes, {b.local()})[0];
  return ShardTensor(f(a.local(), lb), output_spec(a, b, out_shape));
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

ShardTensor sharded_product(const char* op, LocalMatmul f, const ShardTensor& a, const ShardTensor& b) {
  const Shape out_shape = checked_output_shape(op, a, b);
  const std::vector<MatmulPatch> table = {
      {"matmul/rows-or-batch-sharded", matmul_accepts,
       [&](const ShardTensor& x, const ShardTensor& y) { return matmul_run(op, f, x, y, out_shape); }}};
  return dispatch_patch(op, table, {&a, &b}, a, b);
}

}  // namespace

ShardTensor matmul(const ShardTensor& a, const ShardTensor& b) { return sharded_product("matmul", local_matmul, a, b); }
ShardTensor matmul(const ShardTensor& a, const Tensor& b) {
  return sharded_product("matmul", local_matmul, a, patch::replicated(b, a.mesh()));
}
ShardTensor bmm(const ShardTensor& a, const ShardTensor& b) { return sharded_product("bmm", local_bmm, a, b); }
ShardTensor bmm(const ShardTensor& a, const Tensor& b) {
  return sharded_product("bmm", local_bmm, a, patch::replicated(b, a.mesh()));
}

}  // namespace shardrt
