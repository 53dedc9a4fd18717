// Sharded convolution (conv1d/2d/3d) and transposed convolution over sharded spatial dims.
//
// Accepted placements: x (B, Cin, *spatial) with every mesh axis Replicate or Shard(d), d the batch dim or a
//   spatial dim; w, bias plain replicated Tensors. A sharded channel dim or Partial -> MissingShardPatch. Notation
//   per sharded spatial dim: k kernel, s stride, p padding, dl dilation, K = dl*(k-1)+1, h = (K-1)/2, e_j the
//   extent of coordinate j of P, o_j its offset, L = sum e_j, lw_j = h for j > 0 else p, rw_j = h for j < P-1
//   else p, a slice = the bytes of one index of the dim in the tensor exchanged. Each sharded spatial dim takes
//   one path, decided from the spec alone (the same on every rank; anything else is a MissingShardPatch with the
//   reason: s > 1 with k != s, an even K that is not a patchify, a kernel that does not fit L + 2p):
//
//   path (per dim)     when                                    output extent of j          forward / backward
//   local              unsharded, or an axis of one rank       the local op's (any s/p/dl)  none / none
//   halo, neighbour    s == 1, K odd, every e_j >= max(h, 1)   e_j + lw_j + rw_j - 2h       1 halo_exchange / 1 back
//                      and every output extent >= 1
//   halo, general      s == 1, K odd, otherwise (a shard       the centres j owns (below)   1 all_to_all_v / 1 back
//                      thinner than h, zero-size, an edge
//                      shard without output); L + 2p >= K
//   patchify           k == s, p == 0, dl == 1, e_j % s == 0   e_j / s                      none / none
//   conv_transpose     kernel == stride, no padding, any e_j   e_j * k                      none / none
//   batch sharded      S(0)                                    e_j                          none / none
//
// Arguments: checked first, by the local op's rules and with its messages, against x's GLOBAL shape (dtype, rank,
//   weight and bias shapes, kernel >= 1, stride/padding/dilation counts and ranges, the kernel fitting): the local
//   op's typed error for the global tensor, the same on every rank, before any plan or collective.
// Output: x's placements with the extents above, computed locally from every rank's extents. General path (the
//   same numbers where both halo paths apply): output i is centred on input slice c = i + h - p, c in
//   [h - p, L + p - h); coordinate j owns the centres in [o_j, o_j + e_j) (the first also those below 0, the last
//   those from L on), so a zero-size shard, or an edge shard thinner than h - p, gets an output extent of 0.
// Collectives, forward under "conv.forward", backward under "conv.backward", per halo dim in dim order:
//   halo_exchange   h slices of the input (padded already along the halo dims exchanged before it, so 2-D meshes
//                   fill the corners) to each existing neighbour; backward the same bytes back, the halo grads
//                   added into their owners' slices. The last halo dim's exchange is asynchronous and moves only
//                   the slabs (no padded copy) when every extent of its axis is >= 2h+3: the interior outputs are
//                   computed on the local tensor while the slabs travel, then the two edge strips
//                   [slab | 2h+1 slices], [2h+1 slices | slab]. Thinner shards, and earlier halo dims (2-D
//                   meshes), exchange blocking into a padded copy.
//   all_to_all_v    (patch::halo_window) coordinate j reads the input window [first centre - h, last centre + h]
//                   (outside [0, L): zero padding); rank r sends each other j its slices inside j's window:
//                   sum_{j != r} |own_r ∩ window_j| slices forward, sum_{j != r} |own_j ∩ window_r| backward. A
//                   coordinate without output receives nothing: its local op runs on an edge-filled window of K
//                   slices and its one output is dropped (the graph and the collectives match every other rank).
//   then, in backward, when w or bias requires grad: one all_reduce (sum) of the packed w+bias grad per axis where
//   x is Shard, (numel(w)+numel(b)) * max(4, itemsize) * (P-1) bytes. Zero-size ranks take part in every
//   collective, in the same order.
// Saved for backward per rank: the local convs' inputs and the weight, O(local + halo):
//   path               saved input
//   neighbour, 1-D     the local input itself (no copy) and the two edge strips (O(halo))
//   neighbour, 2-D     a padded copy per earlier halo dim, then as 1-D for the last
//   general            the window: e_r + 2h + 2p slices at most
#include <algorithm>
#include <functional>

#include "autograd/ops/common.h"
#include "kernels/cpu/conv.h"
#include "patches/dispatch.h"
#include "patches/errors.h"
#include "patches/ops.h"
#include "patches/patch_util.h"
#include "patches/window.h"

namespace shardrt {

namespace {

std::string ext_str(const Extents& e) {
  std::string s;
  for (size_t i = 0; i < e.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(e[i]);
  }
  return s;
}

}  // namespace

namespace patch {

std::string placement_problem(const ShardTensor& x) {
  if (x.dim() < 3 || x.dim() > 5) return "expected (B, C, *spatial) with 1-3 spatial dims";
  if (x.spec().any_partial()) return "Partial input (a pending sum)";
  if (x.spec().axis_sharding(1) >= 0) return "the channel dim is sharded";
  return "";
}

WindowPlan plan_window(const ShardTensor& x, const WindowArgs& args) {
  WindowPlan plan;
  plan.why_not = placement_problem(x);
  if (!plan.why_not.empty()) return plan;
  const int nd = x.dim() - 2;
  const std::vector<int64_t>& kernel = args.kernel;
  plan.stride = args.stride;
  plan.padding = args.padding;
  plan.dilation = args.dilation;
  for (int i = 0; i < nd; ++i) {
    WindowDim dp;
    dp.dim = 2 + i;
    dp.axis = x.spec().axis_sharding(dp.dim);
    const int64_t k = kernel[i], s = plan.stride[i], p = plan.padding[i], dl = plan.dilation[i];
    if (dp.axis < 0) continue;
    const Extents& e = x.spec().extents(dp.axis);
    const int P = static_cast<int>(e.size());
    const std::string where = "dim " + std::to_string(dp.dim) + " (extents " + ext_str(e) + ")";
    if (P == 1) {
      // An axis of one rank splits nothing: the local op with its own stride, padding and dilation.
      const int64_t span = e[0] + 2 * p - (dl * (k - 1) + 1);
      if (span < 0) {
        plan.why_not = "the kernel does not fit " + where;
        return plan;
      }
      dp.out_extents.push_back(span / s + 1);
      plan.dims.push_back(dp);
      continue;
    }
    if (k == s && p == 0 && dl == 1) {
      dp.kind = WindowKind::patchify;
      for (int64_t ej : e) {
        if (ej % s != 0) {
          plan.why_not = "kernel == stride " + std::to_string(s) + " but a shard extent on " + where +
                         " is not a multiple of the stride";
          return plan;
        }
        dp.out_extents.push_back(ej / s);
      }
    } else if (s == 1) {
      const int64_t K = dl * (k - 1) + 1;
      if (K % 2 == 0) {
        plan.why_not = "even effective kernel " + std::to_string(K) + " on " + where + " needs an asymmetric halo";
        return plan;
      }
      dp.kind = WindowKind::halo;
      const int64_t h = (K - 1) / 2;
      dp.halo = h;
      // The neighbour exchange serves every halo when every shard is at least as thick as the halo it sends (and
      // at least one slice) and every shard gets an output position; otherwise the general halo (all_to_all_v).
      for (int j = 0; j < P; ++j) {
        dp.widths.left.push_back(j > 0 ? h : p);
        dp.widths.right.push_back(j < P - 1 ? h : p);
        const int64_t out = e[j] + dp.widths.left[j] + dp.widths.right[j] - 2 * h;
        if (e[j] < std::max<int64_t>(h, 1) || out < 1) dp.general = true;
        dp.out_extents.push_back(out);
      }
      if (dp.general) {
        // Output i is centred on input slice c = i + h - p, c in [h - p, L + p - h); coordinate j computes the
        // centres it owns (the first also those before 0, the last those from L on), from the input window
        // [first centre - h, last centre + h]. A coordinate without output gets the window [-(2h+1), 0): edge
        // fill only, nothing received (its local op's one output is dropped).
        const int64_t len = total(e);
        const int64_t cmin = h - p, cmax = len + p - h;
        if (cmax <= cmin) {
          plan.why_not = "the kernel does not fit " + where;
          return plan;
        }
        dp.out_extents.clear();
        int64_t off = 0;
        for (int j = 0; j < P; ++j) {
          const int64_t lo = j == 0 ? cmin : std::max(off, cmin);
          const int64_t hi = j == P - 1 ? cmax : std::min(off + e[j], cmax);
          const int64_t n = std::max<int64_t>(0, hi - lo);
          dp.out_extents.push_back(n);
          dp.win_lo.push_back(n > 0 ? lo - h : -(2 * h + 1));
          dp.win_hi.push_back(n > 0 ? hi + h : 0);
          off += e[j];
        }
      }
      plan.padding[i] = 0;  // the halo op pads this dim
    } else {
      plan.why_not = "stride " + std::to_string(s) + " with kernel " + std::to_string(k) + " on " + where +
                     " (only stride 1 with a halo, or kernel == stride)";
      return plan;
    }
    plan.dims.push_back(dp);
  }
  return plan;
}

ShardTensor wrap_output(const ShardTensor& x, const Tensor& y, const std::vector<WindowDim>& dims) {
  AxisExtents ext = x.spec().all_extents();
  if (ext.empty()) ext = patch::no_extents(x.mesh());
  Shape global = y.shape();
  for (int m = 0; m < x.mesh().ndim(); ++m)
    if (x.spec().placement(m).is_shard()) {
      const int d = x.spec().placement(m).dim;
      global[d] = x.global_shape()[d];
    }
  for (const WindowDim& dp : dims) {
    ext[dp.axis] = dp.out_extents;
    global[dp.dim] = total(dp.out_extents);
  }
  return ShardTensor(y, x.spec().with(x.placements(), global, ext));
}

ShardTensor run_window(const char* op, const ShardTensor& x, const WindowPlan& plan, double edge_value,
                       const std::function<Tensor(const Tensor&)>& local_conv) {
  std::vector<const WindowDim*> halos;
  for (const WindowDim& dp : plan.dims)
    if (dp.kind == WindowKind::halo) halos.push_back(&dp);
  Tensor in = x.local();
  Tensor y;
  if (halos.empty()) {
    y = local_conv(in);
  } else {
    auto pad_blocking = [&](const WindowDim& dp, const Tensor& t) {
      if (dp.general)
        return halo_window(op, t, x.mesh(), dp.axis, dp.dim, x.spec().extents(dp.axis), dp.win_lo, dp.win_hi,
                           edge_value);
      return halo_pad(op, t, x.mesh(), dp.axis, dp.dim, dp.widths, edge_value, false).padded;
    };
    for (size_t i = 0; i + 1 < halos.size(); ++i) in = pad_blocking(*halos[i], in);
    // The last halo dim: interior outputs while its halos travel, then the edge strips.
    const WindowDim& dp = *halos.back();
    const int64_t n = in.size(dp.dim), h = dp.halo;
    // The path and the graph's structure must be the same on every rank (the backward engine orders nodes by
    // structure, and the collectives must come in the same order everywhere), so the choice is made from every
    // rank's extent, and every rank builds the same three parts even where a slab is empty (a global edge).
    const Extents& e = x.spec().extents(dp.axis);
    if (!dp.general && e.size() > 1 && *std::min_element(e.begin(), e.end()) >= 2 * h + 3) {
      // Only the halo slabs are received (no padded copy of the local input). While they travel, the outputs
      // that need no halo are computed on the local tensor itself (no copy; its first and last output are
      // dropped: the strips recompute them); then the edge strips [left slab | 2h+1 slices] and
      // [2h+1 slices | right slab], one output more than their slab each.
      HaloSlabs hs = halo_slabs(op, in, x.mesh(), dp.axis, dp.dim, dp.widths, edge_value);
      const Tensor interior = narrow(local_conv(in), dp.dim, 1, n - 2 * h - 2);
      hs.pending.wait();
      const Tensor left = local_conv(cat({hs.left, narrow(in, dp.dim, 0, 2 * h + 1)}, dp.dim));
      const Tensor right = local_conv(cat({narrow(in, dp.dim, n - 2 * h - 1, 2 * h + 1), hs.right}, dp.dim));
      y = cat({left, interior, right}, dp.dim);
    } else {
      y = local_conv(pad_blocking(dp, in));
    }
    // A coordinate without output along a general halo dim ran its local op on an edge-filled window of one
    // output: dropped here, so that every rank still records the same nodes (its weight grads are zeros).
    for (const WindowDim* g : halos)
      if (g->general && g->out_extents[axis_comm(x.mesh(), g->axis).rank()] == 0) y = narrow(y, g->dim, 0, 0);
  }
  return wrap_output(x, y, plan.dims);
}

}  // namespace patch

ShardTensor conv(const ShardTensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride,
                 const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation) {
  const patch::WindowPlan plan = patch::plan_window(
      x, ops_detail::check_conv_args(patch::global_stand_in(x), w, bias, stride, padding, dilation));
  if (!plan.why_not.empty())
    throw MissingShardPatch(detail::concat("conv: no patch for placements ", describe_placements({&x}), " on ",
                                           x.spec().str(), ": ", plan.why_not));
  const std::vector<Tensor> p = patch::reduce_param_grads("conv", x.spec(), {w, bias});
  return patch::run_window("conv", x, plan, 0.0, [&](const Tensor& in) {
    return conv(in, p[0], p[1], plan.stride, plan.padding, plan.dilation);
  });
}

ShardTensor conv_transpose(const ShardTensor& x, const Tensor& w, const Tensor& bias) {
  ops_detail::check_conv_transpose_args(patch::global_stand_in(x), w, bias);
  std::string why = patch::placement_problem(x);
  std::vector<patch::WindowDim> dims;
  for (int d = 2; why.empty() && d < x.dim(); ++d) {
    patch::WindowDim dp;
    dp.dim = d;
    dp.axis = x.spec().axis_sharding(d);
    if (dp.axis < 0) continue;
    dp.kind = patch::WindowKind::patchify;
    for (int64_t e : x.spec().extents(dp.axis)) dp.out_extents.push_back(e * w.size(d));
    dims.push_back(dp);
  }
  if (!why.empty())
    throw MissingShardPatch(detail::concat("conv_transpose: no patch for placements ", describe_placements({&x}),
                                           " on ", x.spec().str(), ": ", why));
  const std::vector<Tensor> p =
      patch::reduce_param_grads("conv_transpose", x.spec(), {w, bias});
  return patch::wrap_output(x, conv_transpose(x.local(), p[0], p[1]), dims);
}

}  // namespace shardrt
