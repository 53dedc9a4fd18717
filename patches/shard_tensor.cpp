// ShardTensor construction and extraction: distribute (local slicing), scatter (point to point from one rank),
// from_local (wrapping, extents given or inferred), full_tensor, and seeding backward from a global grad.
#include "patches/shard_tensor.h"

#include <algorithm>
#include <memory>
#include <numeric>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "patches/errors.h"
#include "runtime/factories.h"

namespace shardrt {

namespace {

// Metadata records exchanged by scatter and from_local have a fixed length, so a rank whose tensor has another
// number of dims cannot desynchronise the collective: the mismatch is reported instead.
constexpr int kMaxMetaDims = 16;

std::string coords_str(const std::vector<int>& c) {
  std::string s;
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(c[i]);
  }
  return s;
}

void check_local_shape(const char* op, const Tensor& local, const ShardSpec& spec) {
  SHARDRT_CHECK(local.defined(), ValueError, op, ": the local tensor is undefined; expected shape ",
                shape_str(spec.local_shape()), " for ", spec.str());
  SHARDRT_CHECK(local.shape() == spec.local_shape(), ShapeError, op, ": local tensor ", local.str(), " does not match ",
                spec.str(), ", which gives this rank (mesh coordinates ", coords_str(spec.mesh().coords()),
                ") the local shape ", shape_str(spec.local_shape()));
}

void reject_unasked_partial(const Placements& p) {
  for (const Placement& q : p)
    SHARDRT_CHECK(!q.is_partial(), ValueError, "from_local: Partial in ", placements_str(p),
                  " wraps rank-distinct parts as one pending sum; pass FromLocalOptions{.allow_partial = true} "
                  "when that is meant");
}

void reject_partial(const char* op, const Placements& p) {
  for (const Placement& q : p)
    SHARDRT_CHECK(!q.is_partial(), MissingShardPatch, op, ": Partial in ", placements_str(p),
                  " cannot be built from a full tensor; Partial (a pending sum) is produced only by sharded ops");
}

// Mesh coordinates of flat mesh rank q (row-major, the last axis fastest).
std::vector<int> coords_of(const Mesh& mesh, int q) {
  std::vector<int> c(mesh.ndim());
  for (int a = mesh.ndim() - 1; a >= 0; --a) {
    c[a] = q % mesh.shape()[a];
    q /= mesh.shape()[a];
  }
  return c;
}

int rank_at(const Mesh& mesh, const std::vector<int>& coords) {
  int q = 0;
  for (int a = 0; a < mesh.ndim(); ++a) q = q * mesh.shape()[a] + coords[a];
  return q;
}

// The window of a global tensor held by the rank at `coords` (a view without autograd history).
Tensor window_at(const Tensor& full, const ShardSpec& spec, const std::vector<int>& coords) {
  Tensor w = full;
  for (int m = 0; m < spec.mesh().ndim(); ++m) {
    if (!spec.placement(m).is_shard()) continue;
    const auto& e = spec.extents(m);
    const int64_t start = std::accumulate(e.begin(), e.begin() + coords[m], int64_t{0});
    w = w.narrow(spec.placement(m).dim, start, e[coords[m]]);
  }
  return w;
}

// ---- from_local with stated extents, checked mode: the ranks compare what they stated ---------------------

// One rank's record: ndim (-1: too many), the local shape (kMaxMetaDims entries), how many extents vectors were
// given, then per mesh axis: placement kind, dim, the number of extents stated for it (-1: none) and the first
// size(axis) of them. Its size depends on the mesh alone, so the records line up whatever the ranks stated.
int64_t stated_record_size(const Mesh& mesh) {
  int64_t n = 2 + kMaxMetaDims;
  for (int m = 0; m < mesh.ndim(); ++m) n += 3 + mesh.shape()[m];
  return n;
}

std::vector<int64_t> stated_record(const Tensor& local, const Mesh& mesh, const Placements& p, const AxisExtents& e) {
  std::vector<int64_t> r(static_cast<std::size_t>(stated_record_size(mesh)), 0);
  r[0] = local.dim() <= kMaxMetaDims ? local.dim() : -1;
  for (int d = 0; d < local.dim() && d < kMaxMetaDims; ++d) r[1 + d] = local.size(d);
  r[1 + kMaxMetaDims] = static_cast<int64_t>(e.size());
  std::size_t at = 2 + kMaxMetaDims;
  for (int m = 0; m < mesh.ndim(); ++m) {
    const bool has_p = m < static_cast<int>(p.size()), has_e = m < static_cast<int>(e.size());
    r[at] = has_p ? static_cast<int64_t>(p[m].kind) : -1;
    r[at + 1] = has_p ? p[m].dim : 0;
    r[at + 2] = has_e ? static_cast<int64_t>(e[m].size()) : -1;
    for (int j = 0; has_e && j < mesh.shape()[m] && j < static_cast<int>(e[m].size()); ++j) r[at + 3 + j] = e[m][j];
    at += 3 + static_cast<std::size_t>(mesh.shape()[m]);
  }
  return r;
}

// What a record states for axis m, as text: "S(0) extents 3,3,3,4". Equal texts <=> equal statements.
std::string stated_axis(const int64_t* r, const Mesh& mesh, int m) {
  std::size_t at = 2 + kMaxMetaDims;
  for (int n = 0; n < m; ++n) at += 3 + static_cast<std::size_t>(mesh.shape()[n]);
  const Placement p{static_cast<Placement::Kind>(r[at]), static_cast<int>(r[at + 1])};
  std::string s = r[at] < 0 ? "no placement" : p.str();
  if (r[at + 2] < 0) return s + " no extents";
  s += " extents ";
  for (int64_t j = 0; j < r[at + 2] && j < mesh.shape()[m]; ++j) {
    if (j) s += ',';
    s += std::to_string(r[at + 3 + j]);
  }
  if (r[at + 2] > mesh.shape()[m]) s += detail::concat(",... (", r[at + 2], " extents)");
  return s;
}

std::string ranks_str(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

// The check is not the program's communication: like the signature check, it stays out of the ledger.
class UncountedScope {
 public:
  explicit UncountedScope(Communicator& c) : comm_(c), saved_(c.ledger_ptr()) {
    comm_.set_ledger(std::make_shared<CommLedger>());
  }
  ~UncountedScope() { comm_.set_ledger(saved_); }
  UncountedScope(const UncountedScope&) = delete;
  UncountedScope& operator=(const UncountedScope&) = delete;

 private:
  Communicator& comm_;
  std::shared_ptr<CommLedger> saved_;
};

// Every rank's record, all-gathered; then, identically on every rank, a ShapeError when the ranks stated
// different placements or extents (naming the ranks and what each stated) or hold local tensors of different
// ranks. Returns the records (rank after rank).
std::vector<int64_t> agree_on_stated(const Tensor& local, const Mesh& mesh, const Placements& placements,
                                     const AxisExtents& extents) {
  Communicator& flat = mesh.flat();
  const int P = flat.size();
  const int64_t k = stated_record_size(mesh);
  const std::vector<int64_t> mine = stated_record(local, mesh, placements, extents);
  Tensor rec = Tensor::empty({k}, DType::i64), all = Tensor::empty({k * P}, DType::i64);
  std::copy(mine.begin(), mine.end(), rec.data<int64_t>());
  {
    UncountedScope uncounted(flat);
    flat.all_gather(rec, all);
  }
  const int64_t* r = all.data<int64_t>();
  std::vector<int64_t> records(r, r + k * P);
  std::string differ;
  for (int m = 0; m < mesh.ndim(); ++m) {
    std::vector<std::pair<std::string, std::vector<int>>> groups;  // in order of first appearance
    for (int q = 0; q < P; ++q) {
      const std::string st = stated_axis(r + q * k, mesh, m);
      auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == st; });
      if (g == groups.end()) groups.push_back({st, {q}});
      else g->second.push_back(q);
    }
    if (groups.size() == 1) continue;
    differ += detail::concat(differ.empty() ? "" : "; ", "axis '", mesh.axis_names()[m], "': ");
    for (std::size_t i = 0; i < groups.size(); ++i)
      differ += detail::concat(i ? ", " : "", ranks_str(groups[i].second),
                               groups[i].second.size() == 1 ? " states " : " state ", groups[i].first);
  }
  SHARDRT_CHECK(differ.empty(), ShapeError, "from_local: the ranks stated different extents (", differ, "; ",
                mesh.str(), ", checked mode)");
  for (int q = 0; q < P; ++q)
    SHARDRT_CHECK(r[q * k] == r[0] && r[q * k] >= 0, ShapeError, "from_local: rank ", q, " holds a local tensor of ",
                  r[q * k] < 0 ? "too many" : std::to_string(r[q * k]), " dims but rank 0 one of ", r[0],
                  " (at most ", kMaxMetaDims, "; placements ", placements_str(placements), ", ", mesh.str(), ")");
  return records;
}

Shape recorded_shape(const std::vector<int64_t>& records, int64_t k, int q) {
  const int64_t* r = records.data() + q * k;
  return Shape(r + 1, r + 1 + std::max<int64_t>(r[0], 0));
}

// from_local with stated extents. In checked mode every rank builds the spec from rank 0's local shape (after the
// ranks agreed on what they stated) and checks every rank's local shape against it, so every rank reaches the
// same verdict; otherwise this rank's shape is the base and only this rank's is checked.
ShardTensor from_local_stated(const Tensor& local, const Mesh& mesh, const Placements& placements,
                              const AxisExtents& extents) {
  const bool checked = mesh.flat().checks_collectives() && mesh.size() > 1;
  std::vector<int64_t> records;
  if (checked) records = agree_on_stated(local, mesh, placements, extents);
  const int64_t k = stated_record_size(mesh);
  const Shape base = checked ? recorded_shape(records, k, 0) : local.shape();
  // Validates (and normalises) the placements against the tensor rank before any dim is read.
  const Placements p = ShardSpec::split_evenly(mesh, placements, base, "from_local").placements();
  Shape global = base;
  if (extents.size() == p.size())
    for (std::size_t m = 0; m < p.size(); ++m)
      if (p[m].is_shard()) global[p[m].dim] = total(extents[m]);
  ShardSpec spec(mesh, p, std::move(global), extents, "from_local");
  if (!checked) {
    check_local_shape("from_local", local, spec);
    return ShardTensor(local, std::move(spec));
  }
  for (int q = 0; q < mesh.size(); ++q) {
    const std::vector<int> c = coords_of(mesh, q);
    Shape want = spec.global_shape();
    for (std::size_t m = 0; m < p.size(); ++m)
      if (p[m].is_shard()) want[p[m].dim] = extents[m][c[m]];
    SHARDRT_CHECK(recorded_shape(records, k, q) == want, ShapeError, "from_local: rank ", q, " (mesh coordinates ",
                  coords_str(c), ") holds local shape ", shape_str(recorded_shape(records, k, q)), " but ", spec.str(),
                  " gives it ", shape_str(want), " (checked mode)");
  }
  return ShardTensor(local, std::move(spec));
}

// ---- scatter: src sends each rank its shard; the adjoint sends one copy of each shard's grad back ----------

struct ScatterCtx {
  Mesh mesh;
  ShardSpec spec;
  int src = 0;
  Shape full_shape;
};

// A rank's shard is decided by its Shard-axis coordinates; ranks differing only on Replicate axes hold the same
// shard and (by the grad convention) the same complete grad for it. The copy that goes back to src is the one at
// src's own coordinates on those axes, so src contributes its own shard and nothing travels twice.
bool returns_grad(const ShardSpec& spec, const std::vector<int>& coords, const std::vector<int>& src_coords) {
  for (int m = 0; m < spec.mesh().ndim(); ++m)
    if (!spec.placement(m).is_shard() && coords[m] != src_coords[m]) return false;
  return true;
}

constexpr int kScatterTag = 0;

std::vector<Tensor> scatter_backward(ScatterCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Communicator& flat = ctx.mesh.flat();
  auto scope = flat.ledger().scope("scatter");
  auto adjoint = flat.ledger().scope("backward");
  const ShardSpec& spec = ctx.spec;
  const std::vector<int> src_coords = coords_of(ctx.mesh, ctx.src);
  const Tensor g = grad_outputs[0].contiguous();
  if (flat.rank() != ctx.src) {
    if (returns_grad(spec, ctx.mesh.coords(), src_coords)) flat.send(g, ctx.src, kScatterTag);
    return {Tensor()};
  }
  Tensor full_grad = zeros(ctx.full_shape, {g.dtype(), g.device()});
  for (int q = 0; q < ctx.mesh.size(); ++q) {
    const std::vector<int> c = coords_of(ctx.mesh, q);
    if (!returns_grad(spec, c, src_coords)) continue;
    Tensor w = window_at(full_grad, spec, c);
    if (q == ctx.src) {
      w.copy_(g);
    } else {
      Tensor part = Tensor::empty(w.shape(), g.dtype(), g.device());
      flat.recv(part, q, kScatterTag);
      w.copy_(part);
    }
  }
  return {full_grad};
}

}  // namespace

ShardTensor::ShardTensor(Tensor local, ShardSpec spec) : local_(std::move(local)), spec_(std::move(spec)) {
  check_local_shape("ShardTensor", local_, *spec_);
}

std::string ShardTensor::str() const {
  if (!defined()) return "ShardTensor(undefined)";
  return detail::concat("ShardTensor(", dtype_name(local_.dtype()), " global ", shape_str(global_shape()), " local ",
                        shape_str(local_.shape()), ", ", placements_str(placements()), ")");
}

ShardTensor distribute(const Tensor& full, const Mesh& mesh, const Placements& placements,
                       std::optional<AxisExtents> extents) {
  check_defined("distribute", full, "full tensor");
  reject_partial("distribute", placements);
  ShardSpec spec = extents ? ShardSpec(mesh, placements, full.shape(), *extents, "distribute")
                           : ShardSpec::split_evenly(mesh, placements, full.shape(), "distribute");
  // Differentiable narrows: each rank's grad of `full` is its own window of the grad, zeros elsewhere.
  Tensor local = full;
  for (int m = 0; m < mesh.ndim(); ++m)
    if (spec.placement(m).is_shard())
      local = narrow(local, spec.placement(m).dim, spec.offset(m), spec.extents(m)[mesh.coords()[m]]);
  return ShardTensor(contiguous(local), std::move(spec));
}

ShardTensor scatter(const Tensor& full, int src, const Mesh& mesh, const Placements& placements) {
  reject_partial("scatter", placements);
  return scatter(full, src, mesh, [&placements](const Shape&) { return ScatterLayout{placements, {}}; });
}

ShardTensor scatter(const Tensor& full, int src, const Mesh& mesh, const ScatterLayoutFor& layout_for) {
  SHARDRT_CHECK(src >= 0 && src < mesh.size(), ValueError, "scatter: source rank ", src, " is not a rank of ",
                mesh.str(), " (", mesh.size(), " ranks)");
  const Communicator& flat = mesh.flat();
  const bool is_src = mesh.rank() == src;
  auto scope = flat.ledger().scope("scatter");

  // Header from src: status (1 ok, 0 undefined, -1 too many dims), requires_grad, dtype, on_gpu, ndim, sizes.
  Tensor header = zeros({5 + kMaxMetaDims}, {DType::i64});
  int64_t* h = header.data<int64_t>();
  if (is_src) {
    h[0] = !full.defined() ? 0 : full.dim() > kMaxMetaDims ? -1 : 1;
    if (h[0] == 1) {
      h[1] = requires_grad(full) ? 1 : 0;
      h[2] = static_cast<int64_t>(full.dtype());
      h[3] = full.device().is_cuda() ? 1 : 0;
      h[4] = full.dim();
      for (int d = 0; d < full.dim(); ++d) h[5 + d] = full.size(d);
    }
  }
  flat.broadcast(header, src);
  SHARDRT_CHECK(h[0] == 1, ValueError, "scatter: the full tensor on source rank ", src,
                h[0] == 0 ? " is undefined" : detail::concat(" has more than ", kMaxMetaDims, " dims"));
  const bool grad = h[1] != 0;
  const DType dtype = static_cast<DType>(h[2]);
  const Device device = h[3] != 0 ? mesh.device() : Device::cpu();
  const Shape shape(h + 5, h + 5 + h[4]);
  // Every rank chooses the same layout from the same broadcast shape.
  const ScatterLayout layout = layout_for(shape);
  reject_partial("scatter", layout.placements);
  ShardSpec spec = layout.extents.empty() ? ShardSpec::split_evenly(mesh, layout.placements, shape, "scatter")
                                          : ShardSpec(mesh, layout.placements, shape, layout.extents, "scatter");

  // src slices; every other rank receives exactly its window, nothing more.
  if (device.is_cuda()) flat.init_cuda();
  Tensor local;
  if (is_src) {
    for (int q = 0; q < mesh.size(); ++q) {
      if (q == src) continue;
      flat.send(window_at(full, spec, coords_of(mesh, q)).contiguous().to(device), q, kScatterTag);
    }
    local = window_at(full, spec, mesh.coords()).contiguous().to(device);
  } else {
    local = Tensor::empty(spec.local_shape(), dtype, device);
    flat.recv(local, src, kScatterTag);
  }
  // Every rank records (src's requires_grad, broadcast above, is the agreed `participate`): non-src ranks have
  // no input needing grad but must still send their shard's grad back in backward.
  std::vector<Tensor> inputs{is_src ? full : Tensor()};
  ScatterCtx ctx{mesh, spec, src, shape};
  local = record_collective("scatter", inputs, {local}, grad, std::move(ctx), scatter_backward)[0];
  return ShardTensor(local, std::move(spec));
}

ShardTensor from_local(const Tensor& local, const Mesh& mesh, const Placements& placements,
                       std::optional<AxisExtents> extents, FromLocalOptions opts) {
  check_defined("from_local", local, "local tensor");
  if (!opts.allow_partial) reject_unasked_partial(placements);
  if (extents) return from_local_stated(local, mesh, placements, *extents);

  bool any_shard = false;
  for (const Placement& q : placements) any_shard = any_shard || q.is_shard();
  if (!any_shard) return ShardTensor(local, ShardSpec(mesh, placements, local.shape(), {}, "from_local"));

  // One all-gather of every rank's shape, before anything that depends on this rank's own shape can throw:
  // identical data everywhere, so every check below reaches the same verdict and message on every rank.
  const Communicator& flat = mesh.flat();
  const int P = mesh.size();
  Tensor mine = zeros({1 + kMaxMetaDims}, {DType::i64}), all = Tensor::empty({P * (1 + kMaxMetaDims)}, DType::i64);
  mine.data<int64_t>()[0] = local.dim() <= kMaxMetaDims ? local.dim() : -1;
  for (int d = 0; d < local.dim() && d < kMaxMetaDims; ++d) mine.data<int64_t>()[1 + d] = local.size(d);
  {
    auto scope = flat.ledger().scope("from_local");
    flat.all_gather(mine, all);
  }
  const int64_t* rec = all.data<int64_t>();
  auto ndim_of = [&](int q) { return rec[q * (1 + kMaxMetaDims)]; };
  auto shape_of = [&](int q) {
    const int64_t* r = rec + q * (1 + kMaxMetaDims);
    return Shape(r + 1, r + 1 + std::max<int64_t>(r[0], 0));
  };
  for (int q = 0; q < P; ++q)
    SHARDRT_CHECK(ndim_of(q) == ndim_of(0) && ndim_of(q) >= 0, ShapeError, "from_local: rank ", q,
                  " holds a local tensor of ", ndim_of(q) < 0 ? "too many" : std::to_string(ndim_of(q)),
                  " dims but rank 0 one of ", ndim_of(0), " (at most ", kMaxMetaDims, "; placements ",
                  placements_str(placements), ", ", mesh.str(), ")");
  const Placements p = ShardSpec::split_evenly(mesh, placements, shape_of(0), "from_local").placements();

  // Axis m's extents are read along the line of ranks through mesh rank 0; every rank must then fit them.
  AxisExtents ext(p.size());
  Shape global = shape_of(0);
  for (std::size_t m = 0; m < p.size(); ++m) {
    if (!p[m].is_shard()) continue;
    std::vector<int> c(mesh.ndim(), 0);
    for (int j = 0; j < mesh.shape()[m]; ++j) {
      c[m] = j;
      ext[m].push_back(shape_of(rank_at(mesh, c))[p[m].dim]);
    }
    global[p[m].dim] = total(ext[m]);
  }
  ShardSpec spec(mesh, p, global, ext, "from_local");
  for (int q = 0; q < P; ++q) {
    const std::vector<int> c = coords_of(mesh, q);
    Shape want = global;
    for (std::size_t m = 0; m < p.size(); ++m)
      if (p[m].is_shard()) want[p[m].dim] = ext[m][c[m]];
    SHARDRT_CHECK(shape_of(q) == want, ShapeError, "from_local: rank ", q, " holds local shape ",
                  shape_str(shape_of(q)), " but the shapes of all ranks imply ", shape_str(want),
                  " for it (sharded dims must agree along each axis, other dims everywhere; inferred ", spec.str(),
                  ")");
  }
  return ShardTensor(local, std::move(spec));
}

Tensor full_tensor(const ShardTensor& t) {
  return redistribute(t, Placements(t.placements().size(), Placement::Replicate())).local();
}

void backward_global(const std::vector<ShardTensor>& roots, const std::vector<Tensor>& global_grads,
                     bool retain_graph) {
  SHARDRT_CHECK(roots.size() == global_grads.size(), ValueError, "backward_global: ", roots.size(), " roots but ",
                global_grads.size(), " grads");
  std::vector<Tensor> locals, seeds;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const ShardTensor& r = roots[i];
    const Tensor& g = global_grads[i];
    check_defined("backward_global", g, "grad");
    SHARDRT_CHECK(g.shape() == r.global_shape(), ShapeError, "backward_global: grad ", g.str(), " for root ", i, " ",
                  r.str(), " must have its global shape ", shape_str(r.global_shape()));
    // Shard axes take this rank's window; Replicate and Partial axes the whole grad (d sum / d part = 1).
    locals.push_back(r.local());
    seeds.push_back(window_at(g, r.spec(), r.mesh().coords()).contiguous().to(r.device()).to(r.dtype()));
  }
  backward(locals, seeds, retain_graph);
}

void backward_global(const ShardTensor& root, const Tensor& global_grad, bool retain_graph) {
  backward_global(std::vector<ShardTensor>{root}, std::vector<Tensor>{global_grad}, retain_graph);
}

}  // namespace shardrt
