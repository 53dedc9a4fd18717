// Indexing along a sharded dim with GLOBAL indices: index_select (replicated index), gather_global (sharded
// index, e.g. neighbour lists) and scatter_add_global (the adjoint of gather_global as a forward op).
//
// Ownership: global row g of the indexed dim lives on the coordinate j of mesh axis A (the axis sharding it)
//   with offset_j <= g < offset_j + extent_j, read from the spec's extents (uneven and zero-size shards exact).
//   Rows move with all_to_all_v over A: a rank sends each requested row once per request (duplicates are not
//   merged), so bytes = (rows requested from other ranks) * F * itemsize, F = the elements of one row.
//   all_gather_v of the whole dim was rejected: it is O(N) memory and bytes on every rank.
//
// index_select(x, dim, index)
//   Accepted: x Shard/Replicate on every axis (no Partial); index a plain 1-D i64 tensor, identical on every rank,
//     values in [0, global extent of dim) (ValueError otherwise, on every rank alike). dim not sharded: the local
//     op, no collective.
//   Output (dim sharded by A): x's placements; dim's global size = index.numel(); A's extents =
//     split_extents(index.numel(), P_A): rank r holds rows index[o_r, o_r + k_r). Other extents as x's.
//   Forward: one all_to_all_v on A under "index_select.forward" (no request phase: the index is replicated, so
//     every rank knows who needs which of its rows), bytes = sum over j != me of rows sent to j * F * itemsize.
//   Backward: one all_to_all_v on A under "index_select.backward" routing the grad rows back to their owners (the
//     same byte count, with sender and receiver swapped), scatter-added into the owner's slice.
//   Saved per rank: the routing plan, O(rows sent + rows received) int64 = O(K/P + L) — no activations.
// gather_global(x, dim, index)
//   Accepted: x sharded along dim by at most one axis A (it may be sharded along other dims by other axes); index
//     an i64 ShardTensor on the same mesh, Shard(0) or Replicate on A, and on every other axis Replicate or
//     Shard(0) where x is Replicate; values in [0, global extent) or < 0 (no row: zeros, no grad). Anything
//     else: MissingShardPatch.
//   Output: x's shape with dim replaced by index's shape; on A Shard(dim) with index's extents (or Replicate when
//     the index is), other axes as x's (shard dims after `dim` shifted by index.dim() - 1).
//   Forward, on A under "gather_global.forward": one agree (validity of the index values, P - 1 bytes), one
//     all_to_all of the per-owner request counts (8 * (P - 1) bytes), one all_to_all_v of the requested global
//     indices (8 * requests to others), one all_to_all_v of the rows (as above).
//   Backward, under "gather_global.backward": one all_to_all_v of grad rows back to the owners, scatter-added
//     (none when the index is Replicate on A: every rank holds the complete output grad, and each owner takes the
//     grads of its own rows from its own copy);
//     on each axis where the index is Shard(0) but x is Replicate, x's local grad is a partial sum and is
//     all-reduced there once (reduce_grads_over): local numel(x) * max(4, itemsize) * (P - 1) bytes.
//   Not along a sharded dim (x Replicate along dim everywhere): the local gather, no forward collective.
//   Saved per rank: the routing plan, O(requests + rows served) int64.
// scatter_add_global(x, dim, index, src)
//   Accepted: as gather_global, with src placed and shaped like gather_global(x, dim, index), except an index
//     sharded on an axis where x is Replicate (the sum would be partial there): MissingShardPatch.
//   Output: x's spec. Forward, under "scatter_add_global.forward": agree, request counts and indices as above, then
//   one all_to_all_v of src's rows to their owners (none when the index, hence src, is Replicate on A: each
//   owner adds the rows of its own copy); backward, under "scatter_add_global.backward": one all_to_all_v
//   fetching the grad rows for src (x's grad is the output grad, local). Saved: the plan.
#include <algorithm>
#include <numeric>

#include "autograd/function.h"
#include "mesh/agree.h"
#include "patches/dispatch.h"
#include "patches/ops.h"
#include "patches/patch_util.h"
#include "runtime/factories.h"

namespace shardrt {

namespace {

// Who sends which rows to whom over axis A, for one requesting pattern.
struct RowPlan {
  int axis = -1;
  int64_t local_rows = 0;              // this rank's extent of the indexed dim
  std::vector<int64_t> send_rows;      // local rows of x, grouped by destination in rank order
  std::vector<int64_t> send_counts;    // rows per destination
  std::vector<int64_t> recv_counts;    // rows per source
  std::vector<int64_t> perm;           // per requested position: its row in the receive buffer, or -1
};

std::vector<int64_t> ends_of(const Extents& extents) {
  std::vector<int64_t> ends(extents.size());
  std::partial_sum(extents.begin(), extents.end(), ends.begin());
  return ends;
}

int owner_of(const std::vector<int64_t>& ends, int64_t g) {
  return static_cast<int>(std::upper_bound(ends.begin(), ends.end(), g) - ends.begin());
}

std::vector<int64_t> host_indices(const Tensor& index) {
  const Tensor h = index.detach().to(Device::cpu()).contiguous();
  const int64_t* p = h.data<int64_t>();
  return std::vector<int64_t>(p, p + h.numel());
}

Tensor index_tensor(const std::vector<int64_t>& v, Device dev) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i64, Device::cpu());
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t.to(dev);
}

// perm and recv_counts of this rank's requests `mine` (receive buffer ordered by source, then request order).
void plan_receive(RowPlan& plan, const std::vector<int64_t>& ends, const std::vector<int64_t>& mine) {
  const int p = static_cast<int>(ends.size());
  plan.recv_counts.assign(p, 0);
  for (int64_t g : mine)
    if (g >= 0) ++plan.recv_counts[owner_of(ends, g)];
  std::vector<int64_t> next(p, 0);
  for (int j = 1; j < p; ++j) next[j] = next[j - 1] + plan.recv_counts[j - 1];
  plan.perm.clear();
  for (int64_t g : mine) plan.perm.push_back(g >= 0 ? next[owner_of(ends, g)]++ : -1);
}

// Every rank's requests known locally (replicated index): no communication.
RowPlan plan_known(int axis, const Extents& extents, int me,
                   const std::vector<std::vector<int64_t>>& requests) {
  RowPlan plan;
  plan.axis = axis;
  const std::vector<int64_t> ends = ends_of(extents);
  const int64_t off = ends[me] - extents[me];
  plan.local_rows = extents[me];
  const int p = static_cast<int>(extents.size());
  plan.send_counts.assign(p, 0);
  for (int r = 0; r < p; ++r)
    for (int64_t g : requests[r])
      if (g >= 0 && owner_of(ends, g) == me) {
        plan.send_rows.push_back(g - off);
        ++plan.send_counts[r];
      }
  plan_receive(plan, ends, requests[me]);
  return plan;
}

// Only this rank's requests known: one all_to_all of counts and one all_to_all_v of the requested indices.
RowPlan plan_requested(const Mesh& mesh, int axis, const Extents& extents,
                       const std::vector<int64_t>& mine, const std::string& label) {
  Communicator& comm = patch::axis_comm(mesh, axis);
  const int p = comm.size(), me = comm.rank();
  RowPlan plan;
  plan.axis = axis;
  const std::vector<int64_t> ends = ends_of(extents);
  const int64_t off = ends[me] - extents[me];
  plan.local_rows = extents[me];
  plan_receive(plan, ends, mine);
  // My requests grouped by owner, in request order within an owner (the order plan_receive assumed).
  std::vector<std::vector<int64_t>> by_owner(p);
  for (int64_t g : mine)
    if (g >= 0) by_owner[owner_of(ends, g)].push_back(g);
  std::vector<int64_t> flat;
  for (const auto& v : by_owner) flat.insert(flat.end(), v.begin(), v.end());
  const Tensor counts_out = index_tensor(plan.recv_counts, Device::cpu());
  const Tensor counts_in = Tensor::empty({p}, DType::i64, Device::cpu());
  const Tensor asked = index_tensor(flat, Device::cpu());
  {
    auto scope = comm.ledger().scope(label);
    comm.all_to_all(counts_out, counts_in);
    plan.send_counts = host_indices(counts_in);
    const Tensor served = Tensor::empty({total(plan.send_counts)}, DType::i64, Device::cpu());
    comm.all_to_all_v(asked, plan.recv_counts, served, plan.send_counts);
    plan.send_rows = host_indices(served);
  }
  for (int64_t& r : plan.send_rows) r -= off;
  return plan;
}

std::vector<int64_t> times(std::vector<int64_t> v, int64_t f) {
  for (int64_t& x : v) x *= f;
  return v;
}

// Rows of xm (L, F) requested by this rank: (M, F); missing rows (perm -1) are zeros.
Tensor fetch_rows(const Mesh& mesh, const RowPlan& plan, const Tensor& xm, const std::string& label) {
  const int64_t f = xm.size(1);
  const Tensor send = index_select(xm, 0, index_tensor(plan.send_rows, xm.device())).contiguous();
  const int64_t r = total(plan.recv_counts);
  const Tensor recv = Tensor::empty({r + 1, f}, xm.dtype(), xm.device());
  recv.narrow(0, r, 1).zero_();
  {
    Communicator& comm = patch::axis_comm(mesh, plan.axis);
    auto scope = comm.ledger().scope(label);
    comm.all_to_all_v(send, times(plan.send_counts, f), recv.narrow(0, 0, r), times(plan.recv_counts, f));
  }
  std::vector<int64_t> perm = plan.perm;
  for (int64_t& i : perm)
    if (i < 0) i = r;
  return index_select(recv, 0, index_tensor(perm, xm.device()));
}

// The adjoint of fetch_rows: gm (M, F) summed into the owners' rows, (L, F).
Tensor push_rows(const Mesh& mesh, const RowPlan& plan, const Tensor& gm, const std::string& label) {
  const int64_t f = gm.size(1);
  const int64_t r = total(plan.recv_counts);
  std::vector<int64_t> inv(static_cast<size_t>(r), 0);
  for (size_t i = 0; i < plan.perm.size(); ++i)
    if (plan.perm[i] >= 0) inv[plan.perm[i]] = static_cast<int64_t>(i);
  const Tensor send = index_select(gm.contiguous(), 0, index_tensor(inv, gm.device())).contiguous();
  const int64_t s = static_cast<int64_t>(plan.send_rows.size());
  const Tensor back = Tensor::empty({s, f}, gm.dtype(), gm.device());
  {
    Communicator& comm = patch::axis_comm(mesh, plan.axis);
    auto scope = comm.ledger().scope(label);
    comm.all_to_all_v(send, times(plan.recv_counts, f), back, times(plan.send_counts, f));
  }
  const Tensor out = zeros({plan.local_rows, f}, {gm.dtype(), gm.device()});
  if (s == 0 || f == 0) return out;
  const Tensor idx = index_tensor(plan.send_rows, gm.device()).view({s, 1}).expand({s, f}).contiguous();
  return scatter_add(out, 0, idx, back);
}

struct GatherCtx {
  Mesh mesh;
  RowPlan plan;
  std::string op;
  // Index replicated along the routing axis: every rank of the axis requested the same rows and holds the same
  // complete output grad, so each owner takes the grad of its own rows from its own copy (no collective; pushing
  // from every requester would count each grad P times). own_pos: requested positions this rank owns; own_rows:
  // their local rows.
  bool local_backward = false;
  std::vector<int64_t> own_pos, own_rows;
};

// The rows of gm (M, F) that this rank's own requests hit in its own slice, summed into (L, F); no collective.
Tensor push_own_rows(const GatherCtx& ctx, const Tensor& gm) {
  const int64_t f = gm.size(1), s = static_cast<int64_t>(ctx.own_rows.size());
  const Tensor out = zeros({ctx.plan.local_rows, f}, {gm.dtype(), gm.device()});
  if (s == 0 || f == 0) return out;
  const Tensor rows = index_select(gm.contiguous(), 0, index_tensor(ctx.own_pos, gm.device()));
  const Tensor where = index_tensor(ctx.own_rows, gm.device()).view({s, 1}).expand({s, f}).contiguous();
  return scatter_add(out, 0, where, rows);
}

// For an index replicated along the routing axis (see GatherCtx::local_backward).
void find_own_rows(GatherCtx& ctx, const ShardTensor& x, const ShardTensor& index, int axis) {
  ctx.local_backward = true;
  const Extents& ext = x.spec().extents(axis);
  const std::vector<int64_t> ends = ends_of(ext);
  const int me = patch::axis_comm(x.mesh(), axis).rank();
  const std::vector<int64_t> mine = host_indices(index.local());
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i] >= 0 && owner_of(ends, mine[i]) == me) {
      ctx.own_pos.push_back(static_cast<int64_t>(i));
      ctx.own_rows.push_back(mine[i] - (ends[me] - ext[me]));
    }
}

std::vector<Tensor> gather_backward(GatherCtx& ctx, const std::vector<Tensor>& g) {
  if (!ctx.local_backward) return {push_rows(ctx.mesh, ctx.plan, g[0], ctx.op + ".backward")};
  return {push_own_rows(ctx, g[0])};
}

std::vector<Tensor> scatter_backward(GatherCtx& ctx, const std::vector<Tensor>& g) {
  return {g[0], fetch_rows(ctx.mesh, ctx.plan, g[0].contiguous(), ctx.op + ".backward")};
}

// x's local tensor with `dim` moved to the front, as (L, F) rows (differentiable).
Tensor as_rows(const Tensor& x, int dim) {
  std::vector<int> order = {dim};
  int64_t f = 1;
  for (int d = 0; d < x.dim(); ++d)
    if (d != dim) order.push_back(d), f *= x.size(d);
  return reshape(contiguous(permute(x, order)), {x.size(dim), f});
}

// Rows (M, F) back to x's layout with `dim` replaced by `idx_shape` (differentiable).
Tensor from_rows(const Tensor& rows, const Shape& x_local, int dim, const Shape& idx_shape) {
  Shape s = idx_shape;
  for (int d = 0; d < static_cast<int>(x_local.size()); ++d)
    if (d != dim) s.push_back(x_local[d]);
  const Tensor t = reshape(rows, s);
  const int k = static_cast<int>(idx_shape.size());
  std::vector<int> order;
  for (int d = 0; d < dim; ++d) order.push_back(k + d);
  for (int d = 0; d < k; ++d) order.push_back(d);
  for (int d = dim + 1; d < static_cast<int>(x_local.size()); ++d) order.push_back(k + d - 1);
  return contiguous(permute(t, order));
}

// ---- index_select -------------------------------------------------------------------------------------------

using IndexSelectPatch = Patch<ShardTensor(ShardTensor, int, Tensor)>;

void check_replicated_index(const char* op, const ShardTensor& x, int dim, const Tensor& index) {
  SHARDRT_CHECK(index.defined() && index.dtype() == DType::i64 && index.dim() == 1, ValueError, op,
                ": index must be a 1-D i64 tensor, got ", index.defined() ? index.str() : "undefined", " for x ",
                x.str());
  const int64_t n = x.global_shape()[dim];
  for (int64_t g : host_indices(index))
    SHARDRT_CHECK(g >= 0 && g < n, ValueError, op, ": index ", g, " out of range [0, ", n, ") of dim ", dim,
                  " of ", x.str());
}

ShardTensor index_select_local(const ShardTensor& x, int dim, const Tensor& index) {
  const int d = wrap_dim(dim, x.dim(), "index_select");
  check_replicated_index("index_select", x, d, index);
  Shape global = x.global_shape();
  global[d] = index.numel();
  return ShardTensor(index_select(x.local(), d, index), x.spec().with(x.placements(), global, x.spec().all_extents()));
}

ShardTensor index_select_sharded(const ShardTensor& x, int dim, const Tensor& index) {
  const int d = wrap_dim(dim, x.dim(), "index_select");
  check_replicated_index("index_select", x, d, index);
  const int axis = x.spec().axis_sharding(d);
  const Communicator& comm = patch::axis_comm(x.mesh(), axis);
  const int p = comm.size(), me = comm.rank();
  const std::vector<int64_t> idx = host_indices(index);
  const std::vector<int64_t> out_ext = split_extents(static_cast<int64_t>(idx.size()), p);
  std::vector<std::vector<int64_t>> requests(p);
  int64_t at = 0;
  for (int r = 0; r < p; ++r) {
    requests[r].assign(idx.begin() + at, idx.begin() + at + out_ext[r]);
    at += out_ext[r];
  }
  GatherCtx ctx{x.mesh(), plan_known(axis, x.spec().extents(axis), me, requests), "index_select", false, {}, {}};
  const Tensor xm = as_rows(x.local(), d);
  const Tensor out = fetch_rows(ctx.mesh, ctx.plan, xm.detach(), "index_select.forward");
  const Tensor y = record("index_select", {xm}, std::vector<Tensor>{out}, std::move(ctx), gather_backward)[0];
  Shape global = x.global_shape();
  global[d] = static_cast<int64_t>(idx.size());
  AxisExtents ext = x.spec().all_extents();
  ext[axis] = out_ext;
  const ShardSpec spec = x.spec().with(x.placements(), global, ext, "index_select");
  return ShardTensor(from_rows(y, x.local().shape(), d, {out_ext[me]}), spec);
}

// ---- gather_global / scatter_add_global ---------------------------------------------------------------------

// The axis sharding x along dim when gather_global / scatter_add_global accept (x, dim, index) with routing;
// -2 when they accept it as a local op (dim not sharded; index Replicate, or Shard(0) where x is Replicate);
// -1 when they do not accept it.
int routing_axis(const ShardTensor& x, int dim, const ShardTensor& index) {
  if (dim < -x.dim() || dim >= x.dim() || x.spec().any_partial() || index.spec().any_partial()) return -1;
  if (!same_mesh(x.mesh(), index.mesh()) || index.dtype() != DType::i64 || index.dim() < 1) return -1;
  const int d = dim < 0 ? dim + x.dim() : dim;
  const int axis = x.spec().axis_sharding(d);
  for (int m = 0; m < static_cast<int>(index.placements().size()); ++m) {
    const Placement& q = index.spec().placement(m);
    if (q.is_replicate()) continue;
    if (!q.is_shard(0)) return -1;
    if (m != axis && !x.spec().placement(m).is_replicate()) return -1;
  }
  return axis < 0 ? -2 : axis;
}

// The spec of gather_global's output: index's dims replace `dim`; an axis sharding the index shards them.
ShardSpec gathered_spec(const ShardTensor& x, int d, const ShardTensor& index, const char* op) {
  const int k = index.dim();
  Shape global;
  for (int e = 0; e < d; ++e) global.push_back(x.global_shape()[e]);
  for (int64_t s : index.global_shape()) global.push_back(s);
  for (int e = d + 1; e < x.dim(); ++e) global.push_back(x.global_shape()[e]);
  Placements pl = x.placements();
  AxisExtents ext = x.spec().all_extents();
  for (int m = 0; m < static_cast<int>(pl.size()); ++m) {
    if (index.spec().placement(m).is_shard()) {
      pl[m] = Placement::Shard(d);
      ext[m] = index.spec().extents(m);
    } else if (pl[m].is_shard(d)) {
      pl[m] = Placement::Replicate();
      ext[m].clear();
    } else if (pl[m].is_shard() && pl[m].dim > d) {
      pl[m] = Placement::Shard(pl[m].dim + k - 1);
    }
  }
  return x.spec().with(pl, global, ext, op);
}

// Local versions (dim not sharded): entries < 0 select a zero row / are dropped.
std::vector<int64_t> perm_local(const std::vector<int64_t>& idx, int64_t l, const char* op) {
  std::vector<int64_t> perm = idx;
  for (int64_t& g : perm) {
    SHARDRT_CHECK(g < l, ValueError, op, ": index ", g, " out of range [0, ", l, ")");
    if (g < 0) g = l;
  }
  return perm;
}

Tensor gather_rows_local(const Tensor& xm, const std::vector<int64_t>& idx) {
  const Tensor padded = cat({xm, zeros({1, xm.size(1)}, {xm.dtype(), xm.device()})}, 0);
  return index_select(padded, 0, index_tensor(perm_local(idx, xm.size(0), "gather_global"), xm.device()));
}

Tensor scatter_rows_local(const Tensor& xm, const std::vector<int64_t>& idx, const Tensor& sm) {
  std::vector<int64_t> rows, at;
  for (size_t i = 0; i < idx.size(); ++i) {
    SHARDRT_CHECK(idx[i] < xm.size(0), ValueError, "scatter_add_global: index ", idx[i], " out of range [0, ",
                  xm.size(0), ")");
    if (idx[i] >= 0) rows.push_back(idx[i]), at.push_back(static_cast<int64_t>(i));
  }
  const int64_t s = static_cast<int64_t>(rows.size()), f = xm.size(1);
  if (s == 0 || f == 0) return add(xm, mul_scalar(sum(sm), 0.0));
  const Tensor valid = index_select(sm, 0, index_tensor(at, sm.device()));
  const Tensor where = index_tensor(rows, xm.device()).view({s, 1}).expand({s, f}).contiguous();
  return scatter_add(xm, 0, where, valid);
}

RowPlan plan_for(const char* op, const ShardTensor& x, int d, const ShardTensor& index, int axis) {
  const Communicator& comm = patch::axis_comm(x.mesh(), axis);
  const std::vector<int64_t> mine = host_indices(index.local());
  const int64_t n = x.global_shape()[d];
  bool ok = true;
  int64_t bad = 0;
  for (int64_t g : mine)
    if (g >= n) ok = false, bad = g;
  const std::string label = std::string(op) + ".forward";
  {
    auto scope = comm.ledger().scope(label);
    agree_or_throw(comm, ok,
                   detail::concat(op, ": index ", bad, " out of range [0, ", n, ") of dim ", d, " of ", x.str()));
  }
  return plan_requested(x.mesh(), axis, x.spec().extents(axis), mine, label);
}

// Axes where the index is sharded but x is replicated (x not sharded along dim there): each rank's grad of x
// is a partial sum over them.
std::vector<int> partial_axes(const ShardTensor& index, int axis) {
  std::vector<int> axes;
  for (int m = 0; m < static_cast<int>(index.placements().size()); ++m)
    if (m != axis && index.spec().placement(m).is_shard()) axes.push_back(m);
  return axes;
}

ShardTensor gather_global_sharded(const ShardTensor& x, int dim, const ShardTensor& index) {
  const int d = dim < 0 ? dim + x.dim() : dim;
  const int axis = routing_axis(x, dim, index);
  const ShardSpec spec = gathered_spec(x, d, index, "gather_global");
  // x meets an index sharded where x is replicated: its grad is reduced there, once (reduce_grads_over).
  const Tensor x_local =
      patch::reduce_grads_over("gather_global", x.mesh(), partial_axes(index, axis), {x.local()})[0];
  const Tensor xm = as_rows(x_local, d);
  if (axis < 0)
    return ShardTensor(
        from_rows(gather_rows_local(xm, host_indices(index.local())), x.local().shape(), d, index.local().shape()),
        spec);
  GatherCtx ctx{x.mesh(), plan_for("gather_global", x, d, index, axis), "gather_global", false, {}, {}};
  if (index.spec().placement(axis).is_replicate()) find_own_rows(ctx, x, index, axis);
  const Tensor out = fetch_rows(ctx.mesh, ctx.plan, xm.detach(), "gather_global.forward");
  const Tensor y = record("gather_global", {xm}, std::vector<Tensor>{out}, std::move(ctx), gather_backward)[0];
  return ShardTensor(from_rows(y, x.local().shape(), d, index.local().shape()), spec);
}

ShardTensor scatter_add_global_sharded(const ShardTensor& x, int dim, const ShardTensor& index,
                                       const ShardTensor& src) {
  const int d = dim < 0 ? dim + x.dim() : dim;
  const int axis = routing_axis(x, dim, index);
  const ShardSpec want = gathered_spec(x, d, index, "scatter_add_global");
  SHARDRT_CHECK(src.spec() == want, ShapeError, "scatter_add_global: src ", src.spec().str(), " but index ",
                index.str(), " into ", x.str(), " needs ", want.str());
  const Tensor xm = as_rows(x.local(), d);
  const int k = index.dim();
  // src's index dims to the front, flattened into rows.
  std::vector<int> order;
  for (int e = 0; e < k; ++e) order.push_back(d + e);
  for (int e = 0; e < src.dim(); ++e)
    if (e < d || e >= d + k) order.push_back(e);
  const int64_t rows = index.local().numel();
  const Tensor sm = reshape(contiguous(permute(src.local(), order)), {rows, xm.size(1)});
  if (axis < 0)
    return ShardTensor(
        from_rows(scatter_rows_local(xm, host_indices(index.local()), sm), x.local().shape(), d, {x.local().size(d)}),
        x.spec());
  GatherCtx ctx{x.mesh(), plan_for("scatter_add_global", x, d, index, axis), "scatter_add_global", false, {}, {}};
  // An index replicated along A comes with src replicated along A: each owner adds the rows of its own copy
  // (pushing from every rank would add each row P times).
  if (index.spec().placement(axis).is_replicate()) find_own_rows(ctx, x, index, axis);
  const Tensor pushed = ctx.local_backward ? push_own_rows(ctx, sm.detach())
                                           : push_rows(ctx.mesh, ctx.plan, sm.detach(), "scatter_add_global.forward");
  const Tensor out = add(xm.detach(), pushed);
  const Tensor y =
      record("scatter_add_global", {xm, sm}, std::vector<Tensor>{out}, std::move(ctx), scatter_backward)[0];
  return ShardTensor(from_rows(y, x.local().shape(), d, {x.local().size(d)}), x.spec());
}

}  // namespace

ShardTensor index_select(const ShardTensor& x, int dim, const Tensor& index) {
  auto unsharded = [](const ShardTensor& t, int dm, const Tensor&) {
    return !t.spec().any_partial() && dm >= -t.dim() && dm < t.dim() &&
           t.spec().axis_sharding(dm < 0 ? dm + t.dim() : dm) < 0;
  };
  auto sharded = [](const ShardTensor& t, int dm, const Tensor&) {
    return !t.spec().any_partial() && dm >= -t.dim() && dm < t.dim();
  };
  static const std::vector<IndexSelectPatch> table = {{"index_select/unsharded-dim", unsharded, index_select_local},
                                                      {"index_select/sharded-dim", sharded, index_select_sharded}};
  return dispatch_patch("index_select", table, {&x}, x, dim, index);
}

ShardTensor gather_global(const ShardTensor& x, int dim, const ShardTensor& index) {
  using P = Patch<ShardTensor(ShardTensor, int, ShardTensor)>;
  static const std::vector<P> table = {
      {"gather_global/sharded-dim",
       [](const ShardTensor& t, int dm, const ShardTensor& i) { return routing_axis(t, dm, i) != -1; },
       gather_global_sharded}};
  return dispatch_patch("gather_global", table, {&x, &index}, x, dim, index);
}

ShardTensor scatter_add_global(const ShardTensor& x, int dim, const ShardTensor& index, const ShardTensor& src) {
  using P = Patch<ShardTensor(ShardTensor, int, ShardTensor, ShardTensor)>;
  static const std::vector<P> table = {
      {"scatter_add_global/sharded-dim",
       [](const ShardTensor& t, int dm, const ShardTensor& i, const ShardTensor& s) {
         const int axis = routing_axis(t, dm, i);
         return axis != -1 && partial_axes(i, axis).empty() && !s.spec().any_partial();
       },
       scatter_add_global_sharded}};
  return dispatch_patch("scatter_add_global", table, {&x, &index, &src}, x, dim, index, src);
}

}  // namespace shardrt
