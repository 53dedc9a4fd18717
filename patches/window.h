// Internal (not installed): the halo op and the window plan shared by the window ops — conv and conv_transpose
// (patches/conv.cpp), pooling (patches/pool.cpp, which adds its strided "start ownership" plan on top), linear
// upsampling and circular padding (patches/pool_upsample_pad.cpp). The halo op itself, its slab and
// general-window forms and the ring wrap live in patches/halo.cpp; the window plan (placement_problem,
// plan_window, run_window, wrap_output) in patches/conv.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/ops/window_args.h"
#include "mesh/comm_handle.h"
#include "mesh/comm_types.h"
#include "patches/shard_spec.h"
#include "patches/shard_tensor.h"

namespace shardrt::patch {

// The halo op: `local` padded along `dim` (sharded by mesh axis `axis`) with widths.left[r] slices before and
// widths.right[r] after on rank r; interior ranks' slices come from their neighbours (halo_exchange), the global
// edges (rank 0's left, the last rank's right) are filled with `edge_value`. Differentiable: backward sends the
// grads of the received slices back to their owners, which add them into their edge slices (one halo_exchange,
// under "<op>.backward"); the edge fill gets no grad. Every rank records the node (its backward has a
// collective). With `async`, `pending` is the exchange still in flight: only the interior (the middle extent
// of `local`) may be read before pending.wait(). The caller checks beforehand, identically on every rank, that
// every neighbour's extent covers the widths (a halo never reaches past one neighbour).
struct HaloPadded {
  Tensor padded;
  CommHandle pending;
};
HaloPadded halo_pad(const char* op, const Tensor& local, const Mesh& mesh, int axis, int dim, const HaloWidths& widths,
                    double edge_value, bool async);

// Circular padding of a dim sharded by `axis` (P > 1): the first rank prepends the last `lo` slices of the last
// rank, the last rank appends the first `hi` slices of the first rank (two ring_shifts; see patches/halo.cpp).
// Differentiable; every rank records the node. The caller checks lo <= e_last and hi <= e_first from the spec.
Tensor ring_wrap(const char* op, const Tensor& local, const Mesh& mesh, int axis, int dim, int64_t lo, int64_t hi);

// The halo op without the padded copy: the received slabs alone (left: widths.left[r] slices, right:
// widths.right[r]; the global edges filled with edge_value), still in flight until pending.wait(). Same
// collectives and backward as halo_pad; the backward adds the returned grads into the local tensor's edges.
struct HaloSlabs {
  Tensor left, right;
  CommHandle pending;
};
HaloSlabs halo_slabs(const char* op, const Tensor& local, const Mesh& mesh, int axis, int dim, const HaloWidths& widths,
                     double edge_value);

// The general halo, for shards thinner than the halo they must provide (zero-size ones included): rank j's window
// is the global slices [win_lo[j], win_hi[j]) of `dim` (an empty range: an empty window), positions outside
// [0, sum(extents)) filled with edge_value; the slices come from whichever ranks own them, in ONE all_to_all_v on
// `axis` under "<op>.forward" (the counts derived from `extents` and the windows, identical on every rank; a rank
// keeps its own slices locally). Backward: the reverse all_to_all_v under "<op>.backward" carries the windows'
// grads back to their owners, which add them into their slices. Every rank records the node. Output: the window,
// extent max(0, win_hi[r] - win_lo[r]) along dim.
Tensor halo_window(const char* op, const Tensor& local, const Mesh& mesh, int axis, int dim,
                   const Extents& extents, const std::vector<int64_t>& win_lo,
                   const std::vector<int64_t>& win_hi, double edge_value);

// Shared by the window ops (conv, pooling; defined in patches/conv.cpp). Why x's placements cannot take any op of this
// family ("" when they can): shards only on the batch or spatial dims, no Partial.
std::string placement_problem(const ShardTensor& x);

// How each sharded spatial dim of a window op (kernel k, stride s, padding p, dilation dl) is split: a halo of
// dl*(k-1)/2 for stride 1 and an odd effective kernel, a local patchify for k == s with p == 0 and dl == 1.
enum class WindowKind { local, halo, patchify };
struct WindowDim {
  WindowKind kind = WindowKind::local;
  int dim = 0, axis = -1;
  int64_t halo = 0;
  HaloWidths widths;                 // halo: (left, right) of every coordinate; edge coordinates get p
  Extents out_extents;               // every coordinate's output extent
  // halo, general fallback (some extent thinner than the halo it must serve, or an edge without output): every
  // coordinate's input window [win_lo, win_hi) in global coordinates of the dim (outside [0, L): the edge fill)
  bool general = false;
  std::vector<int64_t> win_lo, win_hi;
};
struct WindowPlan {
  std::string why_not;  // empty when accepted; else the reason for MissingShardPatch
  std::vector<WindowDim> dims;  // the sharded spatial dims
  std::vector<int64_t> stride, padding, dilation;  // for the local op (0 padding on halo dims: the halo op pads)
};
// A window op's arguments, one entry per spatial dim, as the local op's argument check returns them once it has
// accepted them (autograd/ops/window_args.h: kernel >= 1, stride >= 1, padding >= 0, dilation >= 1; the window
// planner divides by the stride).
using WindowArgs = ops_detail::WindowArgs;
// Decided from the spec and the checked arguments alone, identically on every rank.
WindowPlan plan_window(const ShardTensor& x, const WindowArgs& args);
// Halo-pads every halo dim (global edges filled with edge_value), the last one asynchronously while
// `local_op` computes the interior outputs, then the edge strips; wraps the result with the planned extents.
ShardTensor run_window(const char* op, const ShardTensor& x, const WindowPlan& plan, double edge_value,
                       const std::function<Tensor(const Tensor&)>& local_op);
// x's placements with `dims`' output extents; unsharded dims take y's extents.
ShardTensor wrap_output(const ShardTensor& x, const Tensor& y, const std::vector<WindowDim>& dims);

}  // namespace shardrt::patch
