// Sharded pooling (avg_pool, max_pool) over sharded spatial dims, for any kernel, stride and padding the local op
// accepts (padding <= kernel / 2, dilation 1).
//
// Accepted placements: x (B, C, *spatial), every mesh axis Replicate or Shard(d) with d the batch dim or a spatial
//   dim; a sharded channel dim or Partial -> MissingShardPatch. Notation per sharded spatial dim: k kernel, s
//   stride, p padding, e_j the extent of coordinate j of P, o_j its offset, L = sum e_j, n = (L + 2p - k) / s + 1
//   outputs; output i reads the window of global input slices [i*s - p, i*s - p + k) (outside [0, L): the edge
//   fill, zero for avg_pool, which divides by k as the local op does, -inf for max_pool, which never wins).
// Arguments: checked first, by the local op's rules and with its messages, against x's GLOBAL shape (the local
//   op's typed error for the global tensor, the same on every rank, before any plan or collective).
// Paths, decided from the spec alone (the same on every rank), for the whole op:
//   conv's plan (patches/conv.cpp) where it takes every sharded dim: k == s, p == 0 with every e_j a multiple of
//     s (local, e_j / s, no collective), and s == 1 with an odd k (a halo of k/2 each side, the centre-owned
//     extents of conv: 1 halo_exchange, or 1 all_to_all_v for thin shards; the last one overlapped).
//   otherwise, "start ownership" on every sharded dim of an axis of more than one rank: coordinate j computes
//     the outputs whose window STARTS in its own slices [o_j, o_j + e_j) (the first also those starting below 0,
//     the last those from L on): outputs [i_j, i_{j+1}) with i_j = clamp(ceil((o_j + p) / s), 0, n) (i_0 = 0,
//     i_P = n), so the extents sum to n. Its input window is [i_j*s - p, (i_{j+1} - 1)*s - p + k): from its own
//     slices on (an interior coordinate needs no left halo; the first gets p edge slices) to
//     rw_j = window end - (o_j + e_j) slices past its end (negative: its last slices are not read by it).
//     neighbour   every coordinate has an output and every rw_j (j < P-1) <= e_{j+1}: one halo_exchange of the
//                 right halos: rank j+1 sends max(0, rw_j) slices to rank j (none leftwards); the global edges
//                 are filled locally (the first rank's p, the last rank's max(0, rw_{P-1})). No exchange at all
//                 when every width is 0 (e.g. k == s with aligned extents). The padded block is then cropped to
//                 the window.
//     general     otherwise (a coordinate without output, a zero-size shard, a halo reaching past the next
//                 shard): one all_to_all_v (patch::halo_window) of the windows: rank r sends each other j its
//                 slices inside j's window, sum_{j != r} |own_r ∩ window_j| slices. A coordinate without output
//                 takes the edge-filled window [-k, 0) (nothing received) and drops its one output.
//   An axis of one rank, and unsharded dims: the local op with its own padding.
//   A slice = the bytes of one index of the dim in the tensor exchanged (with two sharded dims the second dim's
//   slices span the first dim's window, so 2-D meshes fill the corners).
// Output: x's placements with the extents above (computed locally from every rank's extents).
// Forward collectives under "<op>.forward", one per sharded dim with P > 1 in dim order (as above). Backward
//   under "<op>.backward": the reverse exchange of each, the same bytes in the other direction (rank j sends the
//   grads of its right halo back to j+1, which adds them into its first slices; the all_to_all_v with the counts
//   reversed). No parameters, no all-reduce.
// Saved for backward per rank: the local op's input, the window: e_r + k + s slices at most per sharded dim,
//   O(local + halo).
#include "autograd/ops/common.h"
#include "patches/dispatch.h"
#include "patches/errors.h"
#include "patches/ops.h"
#include "patches/patch_util.h"
#include "patches/window.h"

#include <algorithm>
#include <functional>
#include <limits>

namespace shardrt {

namespace {

[[noreturn]] void missing(const char* op, const ShardTensor& x, const std::string& why) {
  throw MissingShardPatch(
      detail::concat(op, ": no patch for placements ", describe_placements({&x}), " on ", x.spec().str(), ": ", why));
}

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

// Start ownership of one sharded dim (see the header): the output extents, every coordinate's window and, for
// the neighbour path, the halo widths (left: the first rank's edge fill; right: the next shard's slices, or the
// last rank's edge fill); `general` when the neighbour exchange cannot serve it.
patch::WindowDim plan_strided_dim(int dim, int axis, const Extents& e, int64_t k, int64_t s, int64_t p) {
  patch::WindowDim dp;
  dp.kind = patch::WindowKind::halo;
  dp.dim = dim;
  dp.axis = axis;
  const int P = static_cast<int>(e.size());
  const int64_t len = total(e), n = len > 0 ? (len + 2 * p - k) / s + 1 : 0;
  int64_t off = 0;
  std::vector<int64_t> first(P + 1, n), offsets(P + 1, len);
  for (int j = 0; j < P; ++j) {
    offsets[j] = off;
    first[j] = j == 0 ? 0 : std::clamp<int64_t>(ceil_div(off + p, s), 0, n);
    off += e[j];
  }
  for (int j = 0; j < P; ++j) {
    const int64_t lo = first[j], hi = std::max(first[j], first[j + 1]), count = hi - lo;
    dp.out_extents.push_back(count);
    dp.win_lo.push_back(count > 0 ? lo * s - p : -k);
    dp.win_hi.push_back(count > 0 ? (hi - 1) * s - p + k : 0);
    const int64_t lw = offsets[j] - dp.win_lo[j], rw = dp.win_hi[j] - (offsets[j] + e[j]);
    dp.widths.left.push_back(std::max<int64_t>(0, lw));
    dp.widths.right.push_back(std::max<int64_t>(0, rw));
    if (count == 0 || (j > 0 && lw > 0) || (j < P - 1 && rw > e[j + 1])) dp.general = true;
  }
  return dp;
}

struct StridedPlan {
  std::vector<patch::WindowDim> dims;  // every sharded spatial dim; those of a one-rank axis run locally
  std::vector<int64_t> padding;        // the local op's: 0 on the dims the windows pad
};

StridedPlan plan_strided(const ShardTensor& x, const ops_detail::WindowArgs& args) {
  StridedPlan plan;
  plan.padding = args.padding;
  for (int i = 0; i + 2 < x.dim(); ++i) {
    const int d = 2 + i, axis = x.spec().axis_sharding(d);
    if (axis < 0) continue;
    const Extents& e = x.spec().extents(axis);
    const int64_t k = args.kernel[i], s = args.stride[i], p = args.padding[i];
    if (e.size() == 1) {
      patch::WindowDim dp;
      dp.dim = d;
      dp.axis = axis;
      dp.out_extents.push_back((e[0] + 2 * p - k) / s + 1);
      plan.dims.push_back(dp);
      continue;
    }
    plan.dims.push_back(plan_strided_dim(d, axis, e, k, s, p));
    plan.padding[i] = 0;
  }
  return plan;
}

// Every rank runs the same nodes in the same order (the collectives pair up, the backward engine's order is the
// same everywhere), whatever its extent: a coordinate without output pools its edge-filled window and drops it.
ShardTensor run_strided(const char* op, const ShardTensor& x, const StridedPlan& plan, double edge,
                        const std::function<Tensor(const Tensor&)>& local_op) {
  Tensor in = x.local();
  for (const patch::WindowDim& dp : plan.dims) {
    if (dp.kind != patch::WindowKind::halo) continue;
    const Extents& e = x.spec().extents(dp.axis);
    const int r = patch::axis_comm(x.mesh(), dp.axis).rank();
    if (dp.general) {
      in = patch::halo_window(op, in, x.mesh(), dp.axis, dp.dim, e, dp.win_lo, dp.win_hi, edge);
      continue;
    }
    int64_t offset = 0;
    for (int j = 0; j < r; ++j) offset += e[j];
    bool exchange = false;
    for (size_t j = 0; j < e.size(); ++j) exchange = exchange || dp.widths.left[j] > 0 || dp.widths.right[j] > 0;
    if (exchange) in = patch::halo_pad(op, in, x.mesh(), dp.axis, dp.dim, dp.widths, edge, false).padded;
    // The padded block starts at global slice offset - left width; the window may start later and end earlier.
    in = narrow(in, dp.dim, dp.win_lo[r] - (offset - dp.widths.left[r]), dp.win_hi[r] - dp.win_lo[r]);
  }
  Tensor y = local_op(in);
  for (const patch::WindowDim& dp : plan.dims)
    if (dp.general && dp.out_extents[patch::axis_comm(x.mesh(), dp.axis).rank()] == 0) y = narrow(y, dp.dim, 0, 0);
  return patch::wrap_output(x, y, plan.dims);
}

ShardTensor pool(const char* op, bool is_max, const ShardTensor& x, const std::vector<int64_t>& kernel,
                 const std::vector<int64_t>& stride, const std::vector<int64_t>& padding) {
  // The local op's argument checks on the global tensor, before any plan or collective (identical on every rank).
  const ops_detail::WindowArgs args =
      ops_detail::check_pool_args(op, patch::global_stand_in(x), kernel, stride, padding);
  const std::string why = patch::placement_problem(x);
  if (!why.empty()) missing(op, x, why);
  const double edge = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
  auto local = [&](const std::vector<int64_t>& s, const std::vector<int64_t>& p) {
    return [&, s, p](const Tensor& in) { return is_max ? max_pool(in, kernel, s, p) : avg_pool(in, kernel, s, p); };
  };
  const patch::WindowPlan conv_plan = patch::plan_window(x, args);
  // kernel == stride runs locally only where every shard holds whole windows: the local op refuses an empty one, so
  // a zero-size shard takes the general path (which handles it) instead of throwing on the empty ranks alone.
  bool empty_patchify = false;
  for (const patch::WindowDim& dp : conv_plan.dims)
    empty_patchify = empty_patchify || (dp.kind == patch::WindowKind::patchify &&
                                        std::count(dp.out_extents.begin(), dp.out_extents.end(), 0) > 0);
  if (conv_plan.why_not.empty() && !empty_patchify)
    return patch::run_window(op, x, conv_plan, edge, local(conv_plan.stride, conv_plan.padding));
  const StridedPlan plan = plan_strided(x, args);
  return run_strided(op, x, plan, edge, local(args.stride, plan.padding));
}

}  // namespace

ShardTensor avg_pool(const ShardTensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                     const std::vector<int64_t>& padding) {
  return pool("avg_pool", false, x, kernel, stride, padding);
}

ShardTensor max_pool(const ShardTensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                     const std::vector<int64_t>& padding) {
  return pool("max_pool", true, x, kernel, stride, padding);
}

}  // namespace shardrt
