// redistribute: one hop per changed mesh axis, each a recorded op whose backward is its adjoint under the grad
// convention of shard_tensor.h (grads of Replicate tensors complete and identical, of Shard tensors this rank's
// slice, never Partial):
//
//   hop on axis m           forward                       backward (adjoint)
//   Shard(d) -> Replicate   all_gather_v along d          slice this rank's window (no collective)
//   Replicate -> Shard(d)   slice this rank's window      all_gather_v along d
//   Shard(i) -> Shard(j)    all_to_all_v (i gathered)     all_to_all_v back (j gathered)
//   Shard(d) -> Shard(d)    all_to_all_v (new extents)    all_to_all_v back (the old extents)
//   Partial -> Replicate    all_reduce (sum)              identity
//   Partial -> Shard(d)     reduce_scatter_v along d      all_gather_v along d
//
// Collectives move contiguous buffers whose exchanged dim is outermost, so every rank's segment is one block:
// the dim is permuted to the front, made contiguous, exchanged, and permuted back. Extents come from the spec,
// so zero-size shards are segments of 0 elements. Forward hops run in the ledger scope "redistribute", their
// adjoints in "redistribute.backward".
//
// Targets. redistribute(t, placements) gives every new Shard axis split_extents and keeps the extents of an axis
// whose placement does not change; redistribute(t, placements, extents) and redistribute(t, spec) reach the
// caller's extents as well: an axis sharding the same dim with other extents hops Shard(d) -> Shard(d), one
// all_to_all_v of the rows whose owner changes (bytes: this rank's rows that other ranks own under the target
// extents, times the elements per row and the itemsize; rows that stay on this rank do not count).
#include <algorithm>
#include <numeric>

#include "autograd/function.h"
#include "patches/domain_batch.h"
#include "patches/errors.h"
#include "runtime/factories.h"
#include "patches/shard_tensor.h"

namespace shardrt {

namespace {

// ---- buffers with one dim outermost -------------------------------------------------------------------------

// [d, the other dims in order]
std::vector<int> front_order(int ndim, int d) {
  std::vector<int> order{d};
  for (int k = 0; k < ndim; ++k)
    if (k != d) order.push_back(k);
  return order;
}

std::vector<int> inverse(const std::vector<int>& order) {
  std::vector<int> inv(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) inv[order[i]] = static_cast<int>(i);
  return inv;
}

// `x` with dim d outermost, contiguous: segment k of d is one block of numel/size(d) * extent elements.
Tensor to_front(const Tensor& x, int d) { return x.permute(front_order(x.dim(), d)).contiguous(); }

// The inverse of to_front for a buffer laid out as `front_shape` (d first).
Tensor from_front(const Tensor& buf, const Shape& front_shape, int d) {
  return buf.view(front_shape).permute(inverse(front_order(static_cast<int>(front_shape.size()), d))).contiguous();
}

Shape front_shape(const Shape& s, int d, int64_t extent) {
  Shape f{extent};
  for (int k = 0; k < static_cast<int>(s.size()); ++k)
    if (k != d) f.push_back(s[k]);
  return f;
}

// Product of the dims other than `a` and `b` (pass b = a for "other than a"): the elements per unit of extent.
int64_t numel_except(const Shape& s, int a, int b) {
  int64_t n = 1;
  for (int k = 0; k < static_cast<int>(s.size()); ++k)
    if (k != a && k != b) n *= s[k];
  return n;
}

Extents times(const Extents& ext, int64_t k) {
  std::vector<int64_t> c(ext.size());
  for (std::size_t j = 0; j < ext.size(); ++j) c[j] = ext[j] * k;
  return c;
}

int64_t start_of(const Extents& ext, int coord) {
  return std::accumulate(ext.begin(), ext.begin() + coord, int64_t{0});
}

// ---- the data movements (plain tensors; `c` is the hop's axis) ------------------------------------------------

// x holds this rank's extent of d; returns the concatenation over the axis (all of d).
Tensor gather_along(const Communicator& c, const Tensor& x, int d, const Extents& ext) {
  const int64_t k = numel_except(x.shape(), d, d);
  const int64_t len = total(ext);
  Tensor out = Tensor::empty({len * k}, x.dtype(), x.device());
  c.all_gather_v(to_front(x, d), out, times(ext, k));
  return from_front(out, front_shape(x.shape(), d, len), d);
}

// x holds all of d; returns the window of the rank at `coord`.
Tensor slice_along(const Tensor& x, int d, const Extents& ext, int coord) {
  return x.narrow(d, start_of(ext, coord), ext[coord]).contiguous();
}

// x holds this rank's extent of dim i and all of dim j; returns all of i and this rank's extent of j. Block k of the
// send buffer is the window of j for rank k, laid out i-first, so what arrives from rank s is s's extent of i
// and the blocks concatenate along i.
Tensor exchange(const Communicator& c, const Tensor& x, int i, const Extents& ext_i, int j,
                const Extents& ext_j) {
  const int me = c.rank(), P = c.size();
  const int64_t other = numel_except(x.shape(), i, j);
  const std::vector<int> i_first = front_order(x.dim(), i);
  std::vector<int64_t> send(P), recv(P);
  for (int k = 0; k < P; ++k) {
    send[k] = ext_i[me] * ext_j[k] * other;
    recv[k] = ext_i[k] * ext_j[me] * other;
  }
  Tensor sendbuf = Tensor::empty({total(send)}, x.dtype(), x.device());
  int64_t off = 0;
  for (int k = 0; k < P; ++k) {
    Tensor block = x.narrow(j, start_of(ext_j, k), ext_j[k]).permute(i_first);
    sendbuf.narrow(0, off, send[k]).view(block.shape()).copy_(block);
    off += send[k];
  }
  const int64_t total_i = total(ext_i);
  Shape out_shape = x.shape();
  out_shape[j] = ext_j[me];
  Tensor out = Tensor::empty({total_i * ext_j[me] * other}, x.dtype(), x.device());
  c.all_to_all_v(sendbuf, send, out, recv);
  return from_front(out, front_shape(out_shape, i, total_i), i);
}

// Elements of [a0, a1) that are also in [b0, b1).
int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

// x holds this rank's window of d under the extents `from`; returns its window under `to`. Both partition d in
// rank order, so what this rank sends to ranks 0, 1, ... are consecutive slices of its window and what it receives
// from them concatenates into its new window: the d-first buffer is the send buffer as it is.
Tensor reshard_along(const Communicator& c, const Tensor& x, int d, const Extents& from, const Extents& to) {
  const int me = c.rank(), P = c.size();
  const int64_t k = numel_except(x.shape(), d, d);
  const int64_t from0 = start_of(from, me), to0 = start_of(to, me);
  std::vector<int64_t> send(P), recv(P);
  for (int j = 0; j < P; ++j) {
    const int64_t fj = start_of(from, j), tj = start_of(to, j);
    send[j] = overlap(from0, from0 + from[me], tj, tj + to[j]) * k;
    recv[j] = overlap(fj, fj + from[j], to0, to0 + to[me]) * k;
  }
  Tensor out = Tensor::empty({to[me] * k}, x.dtype(), x.device());
  c.all_to_all_v(to_front(x, d), send, out, recv);
  return from_front(out, front_shape(x.shape(), d, to[me]), d);
}

// x holds all of d as a partial sum; returns this rank's window of the complete sum (16-bit summed in f32).
Tensor reduce_scatter_along(const Communicator& c, const Tensor& x, int d, const Extents& ext, int coord) {
  const int64_t k = numel_except(x.shape(), d, d);
  Tensor out = Tensor::empty({ext[coord] * k}, x.dtype(), x.device());
  c.reduce_scatter_v(to_front(x, d), out, times(ext, k), ReduceOp::sum, Accumulate::f32);
  return from_front(out, front_shape(x.shape(), d, ext[coord]), d);
}

// ---- the transitions, forward and backward side by side ------------------------------------------------------

// What every hop's backward needs: where it runs and the extents on both sides. Shapes only, never data.
struct HopCtx {
  Mesh mesh;
  int axis = 0;
  int from_dim = -1, to_dim = -1;  // the tensor dim sharded by this axis before / after, -1 if none
  std::vector<int64_t> from_ext, to_ext;
  // Replicate -> Shard of a parameter over a domain axis while its domain sums are deferred (patches/domain_batch.h):
  // the backward leaves the grad partial (this rank's window, zeros elsewhere) for the optimizer's one sum.
  bool partial_param_grad = false;

  const Communicator& comm() const { return mesh.axis(mesh.axis_names()[axis]); }
  int coord() const { return mesh.coords()[axis]; }
};

// Adjoints run in "redistribute.backward" (under whatever scope the caller of backward() opened).
struct AdjointScope {
  explicit AdjointScope(const HopCtx& ctx)
      : outer(ctx.comm().ledger().scope("redistribute")), inner(ctx.comm().ledger().scope("backward")) {}
  CommLedger::Scope outer, inner;
};

// Shard(d) -> Replicate. The grad of the Replicate output is complete on every rank: the input's is its window.
Tensor gather_forward(const HopCtx& ctx, const Tensor& x) {
  return gather_along(ctx.comm(), x, ctx.from_dim, ctx.from_ext);
}
std::vector<Tensor> gather_backward(HopCtx& ctx, const std::vector<Tensor>& g) {
  return {slice_along(g[0], ctx.from_dim, ctx.from_ext, ctx.coord())};
}

// Replicate -> Shard(d). The input is Replicate, so its grad must be complete on every rank: gather the windows.
Tensor slice_forward(const HopCtx& ctx, const Tensor& x) { return slice_along(x, ctx.to_dim, ctx.to_ext, ctx.coord()); }
std::vector<Tensor> slice_backward(HopCtx& ctx, const std::vector<Tensor>& g) {
  if (ctx.partial_param_grad) {
    // The deferred form: the same windows, summed once by the optimizer instead of gathered here.
    Shape whole = g[0].shape();
    whole[ctx.to_dim] = total(ctx.to_ext);
    Tensor out = zeros(whole, {g[0].dtype(), g[0].device()});
    out.narrow(ctx.to_dim, start_of(ctx.to_ext, ctx.coord()), ctx.to_ext[ctx.coord()]).copy_(g[0]);
    return {out};
  }
  AdjointScope scope(ctx);
  return {gather_along(ctx.comm(), g[0], ctx.to_dim, ctx.to_ext)};
}

// Shard(i) -> Shard(j). A permutation of the elements over the axis: its adjoint is the inverse permutation.
Tensor all_to_all_forward(const HopCtx& ctx, const Tensor& x) {
  return exchange(ctx.comm(), x, ctx.from_dim, ctx.from_ext, ctx.to_dim, ctx.to_ext);
}
std::vector<Tensor> all_to_all_backward(HopCtx& ctx, const std::vector<Tensor>& g) {
  AdjointScope scope(ctx);
  return {exchange(ctx.comm(), g[0], ctx.to_dim, ctx.to_ext, ctx.from_dim, ctx.from_ext)};
}

// Shard(d) -> Shard(d) with other extents. A permutation too (the rows change owners): the adjoint moves them back.
Tensor reshard_forward(const HopCtx& ctx, const Tensor& x) {
  return reshard_along(ctx.comm(), x, ctx.from_dim, ctx.from_ext, ctx.to_ext);
}
std::vector<Tensor> reshard_backward(HopCtx& ctx, const std::vector<Tensor>& g) {
  AdjointScope scope(ctx);
  return {reshard_along(ctx.comm(), g[0], ctx.to_dim, ctx.to_ext, ctx.from_ext)};
}

// Partial -> Replicate. out = sum over the axis of the parts, so d out / d part = 1: each part's grad is the
// (complete) grad of the output. 16-bit parts are summed in f32 and rounded once.
Tensor reduce_forward(const HopCtx& ctx, const Tensor& x) {
  Tensor out = x.clone();
  ctx.comm().all_reduce(out, ReduceOp::sum, Accumulate::f32);
  return out;
}
std::vector<Tensor> reduce_backward(HopCtx&, const std::vector<Tensor>& g) { return {g[0]}; }

// Partial -> Shard(d). Each part's grad is the complete grad of the sum: gather the output's windows.
Tensor reduce_scatter_forward(const HopCtx& ctx, const Tensor& x) {
  return reduce_scatter_along(ctx.comm(), x, ctx.to_dim, ctx.to_ext, ctx.coord());
}
std::vector<Tensor> reduce_scatter_backward(HopCtx& ctx, const std::vector<Tensor>& g) {
  AdjointScope scope(ctx);
  return {gather_along(ctx.comm(), g[0], ctx.to_dim, ctx.to_ext)};
}

// The six transitions, each a forward with its adjoint.
struct Transition {
  const char* name;
  Tensor (*forward)(const HopCtx&, const Tensor&);
  BackwardFn<HopCtx> backward;
};

const Transition& transition(const Placement& from, const Placement& to) {
  static const Transition gather{"redistribute:all_gather", gather_forward, gather_backward};
  static const Transition slice{"redistribute:slice", slice_forward, slice_backward};
  static const Transition all_to_all{"redistribute:all_to_all", all_to_all_forward, all_to_all_backward};
  static const Transition reshard{"redistribute:reshard", reshard_forward, reshard_backward};
  static const Transition reduce{"redistribute:all_reduce", reduce_forward, reduce_backward};
  static const Transition reduce_scatter{"redistribute:reduce_scatter", reduce_scatter_forward,
                                         reduce_scatter_backward};
  if (from.is_shard()) return !to.is_shard() ? gather : from.dim == to.dim ? reshard : all_to_all;
  if (from.is_replicate()) return slice;
  return to.is_shard() ? reduce_scatter : reduce;
}

// One hop: axis `axis` goes to `to` (with extents `to_ext` when it is a Shard); the other axes are untouched.
ShardTensor hop(const ShardTensor& t, int axis, const Placement& to, const std::vector<int64_t>& to_ext) {
  const ShardSpec& spec = t.spec();
  const Placement from = spec.placement(axis);
  Placements placements = spec.placements();
  placements[axis] = to;
  AxisExtents extents = spec.all_extents();
  extents[axis] = to.is_shard() ? to_ext : std::vector<int64_t>{};
  ShardSpec out_spec = spec.with(placements, spec.global_shape(), extents, "redistribute");

  HopCtx ctx{t.mesh(), axis, from.is_shard() ? from.dim : -1, to.is_shard() ? to.dim : -1, spec.extents(axis), to_ext};
  auto scope = ctx.comm().ledger().scope("redistribute");
  const Transition& tr = transition(from, to);
  const Tensor& x = t.local();
  ctx.partial_param_grad = from.is_replicate() && to.is_shard() && !t.mesh().is_batch_axis(axis) &&
                           domain_param_grad_sums_deferred() && is_leaf(x) && requires_grad(x);
  Tensor y = tr.forward(ctx, x);
  y = record(tr.name, {x}, y, std::move(ctx), tr.backward);
  return ShardTensor(y, std::move(out_spec));
}

// ---- hop order ---------------------------------------------------------------------------------------------------

// Cheapest first: local slices shrink what later hops move, reduce-scatters and all-to-alls keep it sharded,
// all-reduces and all-gathers grow it, so they come last.
int cost_class(const Placement& from, const Placement& to) {
  if (from.is_replicate()) return 0;                 // R -> S: local slice
  if (from.is_partial() && to.is_shard()) return 1;  // reduce-scatter
  if (from.is_shard() && to.is_shard()) return 2;    // all-to-all
  if (from.is_partial()) return 3;                   // all-reduce
  return 4;                                          // all-gather
}

// A hop to Shard(d) on `axis` must wait while another axis still shards d (a dim is sharded by one axis at most).
bool can_hop(const Placements& cur, int axis, const Placement& to) {
  if (!to.is_shard()) return true;
  for (int n = 0; n < static_cast<int>(cur.size()); ++n)
    if (n != axis && cur[n].is_shard(to.dim)) return false;
  return true;
}

struct Hop {
  int axis;
  Placement to;
};

// Every changed axis (another placement, or the same Shard with other extents) hops once, in cost order among
// the hops allowed now. When every remaining hop waits (the axes trade dims, e.g. (S(1), S(2)) -> (S(2), S(1))),
// the first of them that holds a Shard goes through Replicate: (S(1), S(2)) -> (R, S(2)) -> (R, S(1)) ->
// (S(2), S(1)). A hop to a Shard takes the target's extents.
std::vector<Hop> plan(const ShardSpec& from, const ShardSpec& target) {
  Placements cur = from.placements();
  const Placements& to = target.placements();
  std::vector<bool> pending(cur.size());
  for (std::size_t m = 0; m < cur.size(); ++m)
    pending[m] = cur[m] != to[m] || from.extents(static_cast<int>(m)) != target.extents(static_cast<int>(m));
  std::vector<Hop> hops;
  for (;;) {
    int best = -1;
    bool any = false;
    for (int m = 0; m < static_cast<int>(cur.size()); ++m) {
      if (!pending[m]) continue;
      any = true;
      if (can_hop(cur, m, to[m]) && (best < 0 || cost_class(cur[m], to[m]) < cost_class(cur[best], to[best])))
        best = m;
    }
    if (!any) return hops;
    if (best >= 0) {
      hops.push_back({best, to[best]});
      cur[best] = to[best];
      pending[best] = false;
      continue;
    }
    for (int m = 0; m < static_cast<int>(cur.size()); ++m)
      if (pending[m] && cur[m].is_shard()) {
        hops.push_back({m, Placement::Replicate()});
        cur[m] = Placement::Replicate();
        break;
      }
  }
}

// Runs the hops from t's spec to `target` (same mesh and global shape, validated by the caller).
ShardTensor redistribute_to(const ShardTensor& t, const ShardSpec& target) {
  const Placements& to = target.placements();
  for (int m = 0; m < t.mesh().ndim(); ++m)
    SHARDRT_CHECK(!to[m].is_partial() || t.placements()[m].is_partial(), MissingShardPatch,
                  "redistribute: ", placements_str(t.placements()), " -> ", placements_str(to),
                  " asks for Partial on axis '", t.mesh().axis_names()[m],
                  "'; Partial (a pending sum) is produced only by sharded ops");
  if (target == t.spec()) return t;
  ShardTensor cur = t;
  for (const Hop& h : plan(t.spec(), target))
    cur = hop(cur, h.axis, h.to, h.to.is_shard() ? target.extents(h.axis) : std::vector<int64_t>{});
  return cur;
}

}  // namespace

ShardTensor redistribute(const ShardTensor& t, const Placements& placements) {
  SHARDRT_CHECK(t.defined(), ValueError, "redistribute: undefined ShardTensor");
  // Validates the target (count, dims, no dim sharded twice) and gives new shards their split_extents; an axis
  // that keeps its placement keeps its extents.
  const ShardSpec split = ShardSpec::split_evenly(t.mesh(), placements, t.global_shape(), "redistribute");
  AxisExtents extents = split.all_extents();
  for (int m = 0; m < t.mesh().ndim(); ++m)
    if (split.placement(m) == t.spec().placement(m)) extents[m] = t.spec().extents(m);
  return redistribute_to(t, split.with(split.placements(), t.global_shape(), extents, "redistribute"));
}

ShardTensor redistribute(const ShardTensor& t, const Placements& placements, const AxisExtents& extents) {
  SHARDRT_CHECK(t.defined(), ValueError, "redistribute: undefined ShardTensor");
  return redistribute_to(t, ShardSpec(t.mesh(), placements, t.global_shape(), extents, "redistribute"));
}

ShardTensor redistribute(const ShardTensor& t, const ShardSpec& target) {
  SHARDRT_CHECK(t.defined(), ValueError, "redistribute: undefined ShardTensor");
  SHARDRT_CHECK(same_mesh(t.mesh(), target.mesh()) && t.global_shape() == target.global_shape(), ShapeError,
                "redistribute: ", t.spec().str(), " cannot be redistributed to ", target.str(),
                same_mesh(t.mesh(), target.mesh()) ? " (the global shapes differ)" : " (the meshes differ)");
  return redistribute_to(t, target);
}

}  // namespace shardrt
