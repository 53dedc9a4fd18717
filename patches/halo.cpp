// The differentiable halo op (declared in patches/window.h): a local tensor padded along a sharded dim with its
// neighbours' edge slices — the one collective of every halo patch (conv, pooling, linear upsampling).
//
// Accepted: any local tensor; `dim` is sharded by mesh axis `axis`, widths give every rank's (left, right) pad.
//   The caller has checked from the spec that every rank can serve its neighbours' halos.
// Output: a plain local tensor, extent widths.left[r] + n_r + widths.right[r] along dim on rank r.
// Forward collectives: one halo_exchange on `axis` under "<op>.forward": rank r sends widths.right[r-1] slices to
//   r-1 and widths.left[r+1] slices to r+1 (a slice = the bytes of one index of dim of the padded tensor).
// Backward collectives: one halo_exchange on `axis` under "<op>.backward" carrying the grads of the received
//   slices back to their owners: rank r sends widths.left[r] slices to r-1 (r > 0) and widths.right[r] to r+1
//   (r < P-1), the same bytes as the forward moved, in the other direction.
// Saved for backward per rank: nothing but the widths (the grad arrives with the padded shape): O(1).
//
// halo_slabs is the same exchange (same collectives, bytes and backward) without the padded copy: only the
// slices the neighbours need are packed, and the received left/right slabs come back as two tensors.
//
// halo_window is the general halo, for shards thinner than the halo they serve (zero-size ones included): each
// rank's window (global slices [win_lo[r], win_hi[r]), outside the global range the edge fill) is assembled from
// whichever ranks own its slices. Forward: one all_to_all_v on `axis` under "<op>.forward": rank r sends each
// other rank j its own slices inside j's window (|own_r ∩ window_j| slices; its own part is copied locally).
// Backward: one all_to_all_v under "<op>.backward" with the counts reversed, the window's grads going back to
// their owners, which add them into their slices. Saved: the routes (O(P)). The node is recorded when the input
// needs grad (the same on every rank).
//
// The ring wrap (circular padding of a sharded dim, also declared in patches/window.h): the first rank prepends the
// last `lo` slices of the last rank, the last rank appends the first `hi` slices of the first rank — the ring
// neighbours. Forward: two ring_shifts on `axis` under "<op>.forward" (offset +1: the last rank sends lo slices to
// the first; offset -1: the first sends hi slices to the last; every other rank sends and receives nothing but
// takes part). Backward: the same two shifts reversed under "<op>.backward", carrying the wrapped slices' grads
// home, added into the owners' tail/head. Saved: nothing. Needs lo <= e_last and hi <= e_first (checked by the
// caller from the spec).
#include <algorithm>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "mesh/ledger.h"
#include "patches/mutants.h"
#include "patches/patch_util.h"
#include "patches/window.h"
#include "runtime/factories.h"

namespace shardrt::patch {

namespace {

struct HaloCtx {
  Mesh mesh;
  int axis = 0;
  int dim = 0;
  HaloWidths widths;
  std::string label;  // "<op>.backward"
};

std::vector<Tensor> halo_backward(HaloCtx& ctx, const std::vector<Tensor>& grad_outputs);

struct WrapCtx {
  Mesh mesh;
  int axis = 0;
  int dim = 0;
  int64_t lo = 0, hi = 0;
  std::string label;  // "<op>.backward"
};

Tensor slab(const Tensor& like, int dim, int64_t width) {
  Shape shape = like.shape();
  shape[dim] = width;
  return Tensor::empty(shape, like.dtype(), like.device());
}

std::vector<Tensor> wrap_backward(WrapCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Communicator& comm = axis_comm(ctx.mesh, ctx.axis);
  const int p = comm.size(), r = comm.rank();
  const bool first = r == 0, last = r == p - 1;
  const Tensor g = grad_outputs[0].contiguous();
  const int d = ctx.dim;
  const int64_t before = first ? ctx.lo : 0, after = last ? ctx.hi : 0;
  const int64_t n = g.size(d) - before - after;
  Tensor grad = g.narrow(d, before, n).clone();
  // The grads of the first rank's prepended slices go back to the last rank, and of the last rank's appended
  // slices to the first.
  const Tensor send_lo = first ? g.narrow(d, 0, ctx.lo).contiguous() : slab(g, d, 0);
  const Tensor recv_lo = slab(g, d, last ? ctx.lo : 0);
  const Tensor send_hi = last ? g.narrow(d, before + n, ctx.hi).contiguous() : slab(g, d, 0);
  const Tensor recv_hi = slab(g, d, first ? ctx.hi : 0);
  {
    auto scope = comm.ledger().scope(ctx.label);
    comm.ring_shift(send_lo, recv_lo, -1);
    comm.ring_shift(send_hi, recv_hi, 1);
  }
  if (last && ctx.lo > 0) {
    Tensor tail = grad.narrow(d, n - ctx.lo, ctx.lo);
    tail.copy_(add(tail, recv_lo));
  }
  if (first && ctx.hi > 0) {
    Tensor head = grad.narrow(d, 0, ctx.hi);
    head.copy_(add(head, recv_hi));
  }
  return {grad};
}

struct SlabCtx {
  Mesh mesh;
  int axis = 0;
  int dim = 0;
  HaloWidths widths;
  Shape local_shape;
  std::string label;  // "<op>.backward"
};

// The reverse exchange shared by both halo forms: `gl`/`gr` are the grads of the slices this rank received (left,
// right); they travel back to their owners, which add them into `grad`'s first/last slices.
void return_halo_grads(const Mesh& mesh, int axis, int d, const HaloWidths& widths, const Tensor& gl, const Tensor& gr,
                       const Tensor& grad, const std::string& label) {
  Communicator& comm = axis_comm(mesh, axis);
  const int p = comm.size(), r = comm.rank();
  const int64_t lw = widths.left[r], rw = widths.right[r], n = grad.size(d);
  // Reverse widths: rank r receives from r-1 the grads of the right halo r-1 took from r, and from r+1 the grads
  // of its left halo. The "interior" of the reverse buffer is [grad of my left halo | grad of my right halo].
  HaloWidths back{std::vector<int64_t>(p, 0), std::vector<int64_t>(p, 0)};
  for (int j = 0; j < p; ++j) {
    back.left[j] = j > 0 ? widths.right[j - 1] : 0;
    back.right[j] = j < p - 1 ? widths.left[j + 1] : 0;
  }
  const int64_t bl = back.left[r], br = back.right[r];
  Shape shape = grad.shape();
  shape[d] = bl + lw + rw + br;
  Tensor buf = zeros(shape, {grad.dtype(), grad.device()});
  if (lw > 0 && gl.defined()) buf.narrow(d, bl, lw).copy_(gl);
  if (rw > 0 && gr.defined()) buf.narrow(d, bl + lw, rw).copy_(gr);
  {
    auto scope = comm.ledger().scope(label);
    comm.halo_exchange(buf, d, back);
  }
  if (SHARDRT_MUTANT(halo_drop_received_grads)) return;  // a test-only bug (patches/mutants.h)
  if (bl > 0) {
    Tensor edge = grad.narrow(d, 0, bl);
    edge.copy_(add(edge, buf.narrow(d, 0, bl)));
  }
  if (br > 0) {
    Tensor edge = grad.narrow(d, n - br, br);
    edge.copy_(add(edge, buf.narrow(d, bl + lw + rw, br)));
  }
}

std::vector<Tensor> halo_backward(HaloCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const int r = axis_comm(ctx.mesh, ctx.axis).rank();
  const Tensor g = grad_outputs[0].contiguous();
  const int d = ctx.dim;
  const int64_t lw = ctx.widths.left[r], rw = ctx.widths.right[r];
  const int64_t n = g.size(d) - lw - rw;
  Tensor grad = g.narrow(d, lw, n).clone();
  return_halo_grads(ctx.mesh, ctx.axis, d, ctx.widths, g.narrow(d, 0, lw), g.narrow(d, lw + n, rw), grad, ctx.label);
  return {grad};
}

std::vector<Tensor> slab_backward(SlabCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor& gl = grad_outputs[0];
  const Tensor& gr = grad_outputs[1];
  const Tensor& any = gl.defined() ? gl : gr;
  Tensor grad = zeros(ctx.local_shape, {any.dtype(), any.device()});
  return_halo_grads(ctx.mesh, ctx.axis, ctx.dim, ctx.widths, gl, gr, grad, ctx.label);
  return {grad};
}

// The general halo (see halo_window in patches/window.h): what this rank sends to and receives from each peer of
// the axis, as ranges of slices along `dim`, decided from every rank's extents and windows alone.
struct WindowRoutes {
  std::vector<int64_t> send_at, send_len;  // peer j: my local slices [send_at, +send_len) it needs
  std::vector<int64_t> recv_at, recv_len;  // peer j: its slices land at my window positions [recv_at, +recv_len)
  int64_t self_src = 0, self_dst = 0, self_len = 0;  // my own slices inside my window
};

WindowRoutes window_routes(int r, const Extents& e, const std::vector<int64_t>& win_lo,
                           const std::vector<int64_t>& win_hi) {
  const int p = static_cast<int>(e.size());
  std::vector<int64_t> off(p + 1, 0);
  for (int j = 0; j < p; ++j) off[j + 1] = off[j] + e[j];
  WindowRoutes w;
  w.send_at.assign(p, 0);
  w.send_len.assign(p, 0);
  w.recv_at.assign(p, 0);
  w.recv_len.assign(p, 0);
  // The part of owner `o`'s slices inside window `j` (an empty window takes nothing).
  auto overlap = [&](int o, int j, int64_t& lo, int64_t& len) {
    lo = std::max(off[o], win_lo[j]);
    const int64_t hi = std::min(off[o + 1], win_hi[j]);
    len = win_hi[j] > win_lo[j] ? std::max<int64_t>(0, hi - lo) : 0;
  };
  for (int j = 0; j < p; ++j) {
    int64_t lo = 0, len = 0;
    overlap(r, j, lo, len);
    if (j == r) {
      w.self_src = lo - off[r];
      w.self_dst = lo - win_lo[r];
      w.self_len = len;
      continue;
    }
    w.send_at[j] = lo - off[r];
    w.send_len[j] = len;
    overlap(j, r, lo, len);
    w.recv_at[j] = lo - win_lo[r];
    w.recv_len[j] = len;
  }
  return w;
}

int64_t slice_numel(const Shape& shape, int dim) {
  int64_t n = 1;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d)
    if (d != dim) n *= shape[d];
  return n;
}

// One all_to_all_v on `comm`: the slices [send_at[j], +send_len[j]) of `from` go to peer j; what peer j sends
// lands at [recv_at[j], +recv_len[j]) of `into`, added to what is there when `add_into`, else copied.
void route_slices(const Communicator& comm, int dim, const Tensor& from, const std::vector<int64_t>& send_at,
                  const std::vector<int64_t>& send_len, const Tensor& into, const std::vector<int64_t>& recv_at,
                  const std::vector<int64_t>& recv_len, bool add_into) {
  const int p = comm.size();
  const int64_t slice = slice_numel(from.shape(), dim);
  std::vector<int64_t> send_counts(p), recv_counts(p);
  int64_t ns = 0, nr = 0;
  for (int j = 0; j < p; ++j) {
    send_counts[j] = send_len[j] * slice;
    recv_counts[j] = recv_len[j] * slice;
    ns += send_counts[j];
    nr += recv_counts[j];
  }
  const Tensor send = Tensor::empty({ns}, from.dtype(), from.device());
  const Tensor recv = Tensor::empty({nr}, from.dtype(), from.device());
  int64_t at = 0;
  for (int j = 0; j < p; ++j) {
    if (send_len[j] > 0) {
      Shape shape = from.shape();
      shape[dim] = send_len[j];
      send.narrow(0, at, send_counts[j]).view(shape).copy_(from.narrow(dim, send_at[j], send_len[j]));
    }
    at += send_counts[j];
  }
  comm.all_to_all_v(send, send_counts, recv, recv_counts);
  at = 0;
  for (int j = 0; j < p; ++j) {
    if (recv_len[j] > 0) {
      Shape shape = into.shape();
      shape[dim] = recv_len[j];
      const Tensor got = recv.narrow(0, at, recv_counts[j]).view(shape);
      Tensor dst = into.narrow(dim, recv_at[j], recv_len[j]);
      dst.copy_(add_into ? add(dst, got) : got);
    }
    at += recv_counts[j];
  }
}

struct WindowCtx {
  Mesh mesh;
  int axis = 0;
  int dim = 0;
  Shape local_shape;
  WindowRoutes routes;
  std::string label;  // "<op>.backward"
};

std::vector<Tensor> window_backward(WindowCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Communicator& comm = axis_comm(ctx.mesh, ctx.axis);
  const Tensor g = grad_outputs[0].contiguous();
  const WindowRoutes& w = ctx.routes;
  Tensor grad = zeros(ctx.local_shape, {g.dtype(), g.device()});
  if (w.self_len > 0) grad.narrow(ctx.dim, w.self_src, w.self_len).copy_(g.narrow(ctx.dim, w.self_dst, w.self_len));
  // The reverse route: the grads of the slices peer j sent me go back to j; the grads of mine it used come here.
  auto scope = comm.ledger().scope(ctx.label);
  route_slices(comm, ctx.dim, g, w.recv_at, w.recv_len, grad, w.send_at, w.send_len, true);
  return {grad};
}

}  // namespace

HaloSlabs halo_slabs(const char* op, const Tensor& local, const Mesh& mesh, int axis, int dim, const HaloWidths& widths,
                     double edge_value) {
  Communicator& comm = axis_comm(mesh, axis);
  const int p = comm.size(), r = comm.rank();
  const int64_t lw = widths.left[r], rw = widths.right[r], n = local.size(dim);
  // Only the edges the neighbours need travel: the buffer is [left | my first to_left | my last to_right | right].
  const int64_t to_left = r > 0 ? widths.right[r - 1] : 0, to_right = r < p - 1 ? widths.left[r + 1] : 0;
  Shape shape = local.shape();
  shape[dim] = lw + to_left + to_right + rw;
  Tensor buf = full(shape, edge_value, {local.dtype(), local.device()});
  const Tensor x = local.detach();
  if (to_left > 0) buf.narrow(dim, lw, to_left).copy_(x.narrow(dim, 0, to_left));
  if (to_right > 0) buf.narrow(dim, lw + to_left, to_right).copy_(x.narrow(dim, n - to_right, to_right));
  HaloSlabs out;
  {
    auto scope = comm.ledger().scope(std::string(op) + ".forward");
    out.pending = comm.halo_exchange_async(buf, dim, widths);
  }
  const std::string name = std::string(op) + ".halo";
  const std::vector<Tensor> slabs = record(
      name.c_str(), {local},
      std::vector<Tensor>{buf.narrow(dim, 0, lw), buf.narrow(dim, lw + to_left + to_right, rw)},
      SlabCtx{mesh, axis, dim, widths, local.shape(), std::string(op) + ".backward"}, slab_backward);
  out.left = slabs[0];
  out.right = slabs[1];
  return out;
}

Tensor ring_wrap(const char* op, const Tensor& local, const Mesh& mesh, int axis, int dim, int64_t lo, int64_t hi) {
  Communicator& comm = axis_comm(mesh, axis);
  const int p = comm.size(), r = comm.rank();
  const bool first = r == 0, last = r == p - 1;
  const Tensor x = local.detach().contiguous();
  const int64_t n = x.size(dim);
  const Tensor send_lo = last ? x.narrow(dim, n - lo, lo).contiguous() : slab(x, dim, 0);
  const Tensor recv_lo = slab(x, dim, first ? lo : 0);
  const Tensor send_hi = first ? x.narrow(dim, 0, hi).contiguous() : slab(x, dim, 0);
  const Tensor recv_hi = slab(x, dim, last ? hi : 0);
  {
    auto scope = comm.ledger().scope(std::string(op) + ".forward");
    comm.ring_shift(send_lo, recv_lo, 1);
    comm.ring_shift(send_hi, recv_hi, -1);
  }
  const int64_t before = first ? lo : 0, after = last ? hi : 0;
  Tensor out = slab(x, dim, before + n + after);
  if (before > 0) out.narrow(dim, 0, before).copy_(recv_lo);
  out.narrow(dim, before, n).copy_(x);
  if (after > 0) out.narrow(dim, before + n, after).copy_(recv_hi);
  const std::string name = std::string(op) + ".ring_wrap";
  return record(name.c_str(), {local}, std::vector<Tensor>{out},
                WrapCtx{mesh, axis, dim, lo, hi, std::string(op) + ".backward"}, wrap_backward)[0];
}

HaloPadded halo_pad(const char* op, const Tensor& local, const Mesh& mesh, int axis, int dim, const HaloWidths& widths,
                    double edge_value, bool async) {
  Communicator& comm = axis_comm(mesh, axis);
  const int r = comm.rank();
  const int64_t lw = widths.left[r], rw = widths.right[r], n = local.size(dim);
  Shape shape = local.shape();
  shape[dim] = lw + n + rw;
  Tensor padded = full(shape, edge_value, {local.dtype(), local.device()});
  padded.narrow(dim, lw, n).copy_(local.detach());
  HaloPadded out;
  {
    auto scope = comm.ledger().scope(std::string(op) + ".forward");
    out.pending = comm.halo_exchange_async(padded, dim, widths);
  }
  if (!async) out.pending.wait();
  const std::string name = std::string(op) + ".halo";
  out.padded = record(name.c_str(), {local}, std::vector<Tensor>{padded},
                      HaloCtx{mesh, axis, dim, widths, std::string(op) + ".backward"}, halo_backward)[0];
  return out;
}

Tensor halo_window(const char* op, const Tensor& local, const Mesh& mesh, int axis, int dim,
                   const Extents& extents, const std::vector<int64_t>& win_lo,
                   const std::vector<int64_t>& win_hi, double edge_value) {
  Communicator& comm = axis_comm(mesh, axis);
  const int r = comm.rank();
  const WindowRoutes w = window_routes(r, extents, win_lo, win_hi);
  const Tensor x = local.detach().contiguous();
  Shape shape = x.shape();
  shape[dim] = std::max<int64_t>(0, win_hi[r] - win_lo[r]);
  Tensor out = full(shape, edge_value, {x.dtype(), x.device()});
  if (w.self_len > 0) out.narrow(dim, w.self_dst, w.self_len).copy_(x.narrow(dim, w.self_src, w.self_len));
  {
    auto scope = comm.ledger().scope(std::string(op) + ".forward");
    route_slices(comm, dim, x, w.send_at, w.send_len, out, w.recv_at, w.recv_len, false);
  }
  const std::string name = std::string(op) + ".halo_window";
  return record(name.c_str(), {local}, std::vector<Tensor>{out},
                WindowCtx{mesh, axis, dim, local.shape(), w, std::string(op) + ".backward"}, window_backward)[0];
}

}  // namespace shardrt::patch
