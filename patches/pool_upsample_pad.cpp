// Sharded upsampling (nearest, linear) and padding over sharded spatial dims (pooling: patches/pool.cpp).
//
// Accepted placements (all): x (B, C, *spatial), every mesh axis Replicate or Shard(d) with d the batch dim or a
//   spatial dim; a sharded channel dim or Partial -> MissingShardPatch. Per sharded spatial dim (extents e_j, L
//   their sum, o_j offsets), the op's configuration picks the path; anything not listed is a MissingShardPatch:
//
//   op, configuration                        when (extents)                    output extent   forward / backward
//   upsample_nearest, out = f * L            any, zero-size included           f * e_j         none / none
//   upsample_linear, align_corners = false   no zero-size shard                f * e_j         1 halo_exchange
//                                            a zero-size shard                 f * e_j         1 all_to_all_v
//   pad constant, pads >= 0                  any                               e_j + lo | hi   none / none
//   pad reflect                              edge shards longer than the pad   e_j + lo | hi   none / none
//   pad replicate                            non-empty edge shards that pad    e_j + lo | hi   none / none
//   pad circular                             e_last >= lo, e_first >= hi       e_j + lo | hi   2 ring_shift
//
// Arguments: checked first, by the local ops' rules and with their messages, against x's GLOBAL shape (dtype,
//   rank, upsample output sizes; pad counts, crops and reflect widths): the local op's typed error for the
//   global tensor, the same on every rank, before any plan or collective. What the local op accepts but no patch splits (a non-integer
//   upsample factor, negative pads on a sharded dim, ...) is the MissingShardPatch of the table.
// "lo | hi": pad's lo on coordinate 0 and hi on the last coordinate; pads apply at the GLOBAL edges only.
// Forward collectives, under "<op>.forward":
//   halo_exchange (upsample_linear: 1 slice) to each existing neighbour; upsample_linear replicates the global
//     edges locally, as the serial op clamps.
//   all_to_all_v (patch::halo_window): upsample_linear: coordinate j receives the slices of
//     [o_j - 1, o_j + e_j + 1) ∩ [0, L) it does not own, rank r sending sum_{j != r} |own_r ∩ window_j| slices.
//   ring_shift (pad circular, P > 1): the last rank sends lo slices to the first, the first hi slices to the
//     last; the other ranks take part with empty messages.
// Backward collectives: one halo_exchange (ring_shift, all_to_all_v) per forward one, same axis, under
//   "<op>.backward", the reverse counts (the halo grads return to their owners); no parameters, no all-reduce.
// Saved for backward per rank: the local op's on the halo-padded local input: O(local + halo).
#include "autograd/ops/common.h"
#include "patches/dispatch.h"
#include "patches/errors.h"
#include "patches/ops.h"
#include "patches/patch_util.h"
#include "patches/window.h"

#include <algorithm>

namespace shardrt {

namespace {

[[noreturn]] void missing(const char* op, const ShardTensor& x, const std::string& why) {
  throw MissingShardPatch(
      detail::concat(op, ": no patch for placements ", describe_placements({&x}), " on ", x.spec().str(), ": ", why));
}

// Per sharded spatial dim of an upsample: the integer factor f and every coordinate's output extent.
struct UpsamplePlan {
  std::string why_not;
  std::vector<patch::WindowDim> dims;
  std::vector<int64_t> factor;  // per entry of dims
};

// out_size: checked, one entry per spatial dim.
UpsamplePlan plan_upsample(const ShardTensor& x, const std::vector<int64_t>& out_size) {
  UpsamplePlan plan;
  plan.why_not = patch::placement_problem(x);
  if (!plan.why_not.empty()) return plan;
  for (int d = 2; d < x.dim(); ++d) {
    patch::WindowDim dp;
    dp.dim = d;
    dp.axis = x.spec().axis_sharding(d);
    if (dp.axis < 0) continue;
    const int64_t len = x.global_shape()[d], out = out_size[d - 2];
    if (len == 0 || out % len != 0) {
      plan.why_not = "out_size " + std::to_string(out) + " is not an integer multiple of the sharded extent " +
                     std::to_string(len) + " of dim " + std::to_string(d);
      return plan;
    }
    const int64_t f = out / len;
    const Extents& e = x.spec().extents(dp.axis);
    const int P = static_cast<int>(e.size());
    // A zero-size shard cannot serve its neighbours' halo of one slice: the general halo (patch::halo_window),
    // coordinate j reading the global slices [o_j - 1, o_j + e_j + 1) clipped to [0, L) (the global edges are
    // replicated locally); a zero-size one reads the edge-filled window [-1, 0): nothing received.
    int64_t off = 0;
    for (int j = 0; j < P; ++j) {
      if (e[j] == 0) dp.general = true;
      dp.out_extents.push_back(e[j] * f);
      dp.widths.left.push_back(j > 0 ? 1 : 0);
      dp.widths.right.push_back(j < P - 1 ? 1 : 0);
      dp.win_lo.push_back(e[j] > 0 ? std::max<int64_t>(0, off - 1) : -1);
      dp.win_hi.push_back(e[j] > 0 ? std::min(len, off + e[j] + 1) : 0);
      off += e[j];
    }
    plan.dims.push_back(dp);
    plan.factor.push_back(f);
  }
  return plan;
}

// Local output sizes: unsharded dims as requested, sharded dims f * (local extent + extra).
std::vector<int64_t> local_out_size(const Tensor& in, const std::vector<int64_t>& out_size, const UpsamplePlan& plan) {
  std::vector<int64_t> s = out_size;
  for (size_t i = 0; i < plan.dims.size(); ++i) s[plan.dims[i].dim - 2] = plan.factor[i] * in.size(plan.dims[i].dim);
  return s;
}

// (before, after) pairs from the last dim, as autograd/ops.h's pad wants, with (lo, hi) on dim d only.
std::vector<int64_t> pads_on(int ndim, int d, int64_t lo, int64_t hi) {
  std::vector<int64_t> pads(static_cast<size_t>(2 * (ndim - d)), 0);
  pads[2 * (ndim - 1 - d)] = lo;
  pads[2 * (ndim - 1 - d) + 1] = hi;
  return pads;
}

}  // namespace

ShardTensor upsample_nearest(const ShardTensor& x, const std::vector<int64_t>& out_size_in) {
  const std::vector<int64_t> out_size =
      ops_detail::check_upsample_args("upsample_nearest", patch::global_stand_in(x), out_size_in);
  const UpsamplePlan plan = plan_upsample(x, out_size);
  if (!plan.why_not.empty()) missing("upsample_nearest", x, plan.why_not);
  // Integer factors: output j reads input j / f, inside the same shard (a zero-size shard gives an empty one).
  const Tensor y = upsample_nearest(x.local(), local_out_size(x.local(), out_size, plan));
  return patch::wrap_output(x, y, plan.dims);
}

ShardTensor upsample_linear(const ShardTensor& x, const std::vector<int64_t>& out_size_in, bool align_corners) {
  const std::vector<int64_t> out_size =
      ops_detail::check_upsample_args("upsample_linear", patch::global_stand_in(x), out_size_in);
  UpsamplePlan plan = plan_upsample(x, out_size);
  if (plan.why_not.empty() && align_corners) plan.why_not = "align_corners = true on a sharded dim";
  if (!plan.why_not.empty()) missing("upsample_linear", x, plan.why_not);
  // One slice of each neighbour per side; the global edges replicate their last slice, which is what the serial
  // op's clamping reads. Upsampled by f, the padded block's outputs [f, f + f*n) are exactly this rank's.
  // The general halo (a zero-size shard on the axis): the window holds the neighbours' slices where they exist;
  // a zero-size coordinate upsamples its edge-filled slice and drops the result (the same graph everywhere).
  Tensor in = x.local();
  for (const patch::WindowDim& dp : plan.dims) {
    const Communicator& comm = patch::axis_comm(x.mesh(), dp.axis);
    const int r = comm.rank();
    int64_t lo = r == 0 ? 1 : 0, hi = r == comm.size() - 1 ? 1 : 0;
    if (dp.general) {
      const Extents& e = x.spec().extents(dp.axis);
      int64_t off = 0, len = 0;
      for (int j = 0; j < static_cast<int>(e.size()); ++j) {
        if (j < r) off += e[j];
        len += e[j];
      }
      in = patch::halo_window("upsample_linear", in, x.mesh(), dp.axis, dp.dim, e, dp.win_lo, dp.win_hi, 0.0);
      lo = e[r] > 0 && off == 0 ? 1 : 0;
      hi = e[r] > 0 && off + e[r] == len ? 1 : 0;
    } else {
      in = patch::halo_pad("upsample_linear", in, x.mesh(), dp.axis, dp.dim, dp.widths, 0.0, false).padded;
    }
    in = pad(in, pads_on(in.dim(), dp.dim, lo, hi), PadMode::replicate);
  }
  Tensor y = upsample_linear(in, local_out_size(in, out_size, plan), false);
  for (size_t i = 0; i < plan.dims.size(); ++i) {
    const patch::WindowDim& dp = plan.dims[i];
    const int64_t f = plan.factor[i];
    if (dp.out_extents[patch::axis_comm(x.mesh(), dp.axis).rank()] == 0)
      y = narrow(y, dp.dim, 0, 0);
    else
      y = narrow(y, dp.dim, f, y.size(dp.dim) - 2 * f);
  }
  return patch::wrap_output(x, y, plan.dims);
}

ShardTensor pad(const ShardTensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  ops_detail::check_pad_args(patch::global_stand_in(x), pads, mode);
  std::string why = patch::placement_problem(x);
  const int nd = x.dim();
  if (why.empty() && (pads.size() % 2 != 0 || static_cast<int>(pads.size()) / 2 > nd - 2))
    why = "pads must be (before, after) pairs for at most the spatial dims";
  std::vector<int64_t> local = pads;
  std::vector<patch::WindowDim> dims;
  for (int i = 0; why.empty() && 2 * i < static_cast<int>(pads.size()); ++i) {
    const int d = nd - 1 - i;
    patch::WindowDim dp;
    dp.dim = d;
    dp.axis = x.spec().axis_sharding(d);
    if (dp.axis < 0) continue;
    const int64_t lo = pads[2 * i], hi = pads[2 * i + 1];
    const Extents& e = x.spec().extents(dp.axis);
    const int P = static_cast<int>(e.size());
    const int c = patch::axis_comm(x.mesh(), dp.axis).rank();
    const std::string where = "dim " + std::to_string(d);
    if (lo < 0 || hi < 0) why = "negative pads (cropping) on sharded " + where;
    else if (mode == PadMode::circular && (e[P - 1] < lo || e[0] < hi))
      why = "circular padding of sharded " + where + " needs the last shard >= lo and the first >= hi";
    else if (mode == PadMode::reflect && ((lo > 0 && e[0] <= lo) || (hi > 0 && e[P - 1] <= hi)))
      why = "reflect padding of sharded " + where + " needs the edge shards longer than their pad";
    else if (mode == PadMode::replicate && ((lo > 0 && e[0] == 0) || (hi > 0 && e[P - 1] == 0)))
      why = "replicate padding of sharded " + where + " from a zero-size edge shard";
    for (int j = 0; j < P; ++j) dp.out_extents.push_back(e[j] + (j == 0 ? lo : 0) + (j == P - 1 ? hi : 0));
    local[2 * i] = c == 0 ? lo : 0;
    local[2 * i + 1] = c == P - 1 ? hi : 0;
    dims.push_back(dp);
  }
  if (!why.empty()) missing("pad", x, why);
  Tensor y = x.local();
  if (mode == PadMode::circular) {
    // Unsharded dims (and axes of one rank) wrap locally; sharded dims wrap between the ring neighbours.
    std::vector<int64_t> here = pads;
    for (const patch::WindowDim& dp : dims)
      if (patch::axis_comm(x.mesh(), dp.axis).size() > 1) here[2 * (nd - 1 - dp.dim)] = here[2 * (nd - 1 - dp.dim) + 1] = 0;
    bool any_here = false;
    for (int64_t v : here) any_here = any_here || v != 0;
    if (any_here) y = pad(y, here, PadMode::circular);
    for (const patch::WindowDim& dp : dims)
      if (patch::axis_comm(x.mesh(), dp.axis).size() > 1)
        y = patch::ring_wrap("pad", y, x.mesh(), dp.axis, dp.dim, pads[2 * (nd - 1 - dp.dim)],
                             pads[2 * (nd - 1 - dp.dim) + 1]);
    return patch::wrap_output(x, y, dims);
  }
  // Only the ranks holding a global edge pad it; the others pad by zero. Every rank records the same node, so the
  // graph (and the order the backward engine runs other ops' collectives in) is the same on every rank.
  bool any = false;
  for (int64_t v : pads) any = any || v != 0;
  // An empty shard has nothing to reflect or replicate (its local pads are 0 where it is empty); the local op
  // would refuse reflect (0, 0) on an empty dim, on that rank alone. Constant gives the same empty result.
  if (any) y = pad(y, local, y.numel() == 0 ? PadMode::constant : mode, value);
  return patch::wrap_output(x, y, dims);
}

}  // namespace shardrt
