#include "patches/shard_spec.h"

#include <numeric>

#include "runtime/errors.h"

namespace shardrt {

namespace {

std::string extents_str(const Extents& e) {
  std::string s;
  for (std::size_t i = 0; i < e.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(e[i]);
  }
  return s;
}

// What every validation message ends with, so the error says which tensor and layout it is about.
std::string context(const Mesh& mesh, const Placements& p, const Shape& global) {
  return detail::concat(" (placements ", placements_str(p), ", global shape ", shape_str(global), ", ", mesh.str(),
                        ")");
}

// Checks the placements against the mesh and the tensor rank and wraps negative Shard dims. Pure function of its
// arguments, so every rank reaches the same verdict without communicating.
Placements checked_placements(const Mesh& mesh, Placements p, const Shape& global, const char* op) {
  const int nd = static_cast<int>(global.size());
  SHARDRT_CHECK(static_cast<int>(p.size()) == mesh.ndim(), ValueError, op, ": ", p.size(), " placements for a mesh of ",
                mesh.ndim(), " axes", context(mesh, p, global));
  for (int64_t s : global)
    SHARDRT_CHECK(s >= 0, ShapeError, op, ": negative size in the global shape", context(mesh, p, global));
  const Placements given = p;
  for (std::size_t m = 0; m < p.size(); ++m) {
    if (!p[m].is_shard()) continue;
    SHARDRT_CHECK(p[m].dim >= -nd && p[m].dim < nd, ValueError, op, ": ", given[m].str(), " on axis '",
                  mesh.axis_names()[m], "' names a dim that a ", nd, "-d tensor does not have",
                  context(mesh, given, global));
    if (p[m].dim < 0) p[m].dim += nd;
  }
  // One mesh axis per tensor dim: extents of a dim split twice would depend on the other axis' coordinate,
  // which the per-axis extents cannot express.
  for (std::size_t m = 0; m < p.size(); ++m)
    for (std::size_t n = 0; n < m; ++n)
      SHARDRT_CHECK(!(p[m].is_shard() && p[n].is_shard(p[m].dim)), ValueError, op, ": tensor dim ", p[m].dim,
                    " is sharded by both axis '", mesh.axis_names()[n], "' and axis '", mesh.axis_names()[m],
                    "'; a dim may be sharded by at most one mesh axis", context(mesh, given, global));
  return p;
}

}  // namespace

Extents split_extents(int64_t size, int n) {
  SHARDRT_CHECK(n >= 1, ValueError, "split_extents: ", size, " elements over ", n, " ranks; need at least one rank");
  SHARDRT_CHECK(size >= 0, ValueError, "split_extents: negative size ", size, " over ", n, " ranks");
  Extents e(static_cast<std::size_t>(n), size / n);
  for (int64_t r = 0; r < size % n; ++r) e[static_cast<std::size_t>(r)] += 1;
  return e;
}

int64_t total(const Extents& extents) { return std::accumulate(extents.begin(), extents.end(), int64_t{0}); }

ShardSpec::ShardSpec(Mesh mesh, Placements placements, Shape global_shape, AxisExtents extents,
                     const char* op)
    : mesh_(std::move(mesh)),
      placements_(checked_placements(mesh_, std::move(placements), global_shape, op)),
      global_shape_(std::move(global_shape)),
      extents_(std::move(extents)) {
  const std::string ctx = context(mesh_, placements_, global_shape_);
  if (extents_.empty()) extents_.resize(placements_.size());
  SHARDRT_CHECK(extents_.size() == placements_.size(), ValueError, op, ": extents for ", extents_.size(),
                " axes but the mesh has ", placements_.size(), ctx);
  for (std::size_t m = 0; m < placements_.size(); ++m) {
    const std::string& axis = mesh_.axis_names()[m];
    const Extents& e = extents_[m];
    if (!placements_[m].is_shard()) {
      SHARDRT_CHECK(e.empty(), ValueError, op, ": extents ", extents_str(e), " given for axis '", axis, "', which is ",
                    placements_[m].str(), ", not Shard", ctx);
      continue;
    }
    const int d = placements_[m].dim;
    SHARDRT_CHECK(static_cast<int>(e.size()) == mesh_.shape()[m], ShapeError, op, ": axis '", axis, "' (",
                  placements_[m].str(), ") has ", mesh_.shape()[m], " ranks but ", e.size(), " extents (",
                  extents_str(e), ") were given", ctx);
    for (int64_t x : e)
      SHARDRT_CHECK(x >= 0, ValueError, op, ": negative extent in ", extents_str(e), " for axis '", axis, "'", ctx);
    const int64_t sum = total(e);
    SHARDRT_CHECK(sum == global_shape_[d], ShapeError, op, ": extents ", extents_str(e), " of axis '", axis, "' (",
                  placements_[m].str(), ") sum to ", sum, " but dim ", d, " has global extent ", global_shape_[d],
                  ctx);
  }
}

ShardSpec ShardSpec::split_evenly(Mesh mesh, Placements placements, Shape global_shape, const char* op) {
  Placements p = checked_placements(mesh, std::move(placements), global_shape, op);
  AxisExtents extents(p.size());
  for (std::size_t m = 0; m < p.size(); ++m)
    if (p[m].is_shard()) extents[m] = split_extents(global_shape[p[m].dim], mesh.shape()[m]);
  return ShardSpec(std::move(mesh), std::move(p), std::move(global_shape), std::move(extents), op);
}

int ShardSpec::axis_sharding(int d) const {
  for (std::size_t m = 0; m < placements_.size(); ++m)
    if (placements_[m].is_shard(d)) return static_cast<int>(m);
  return -1;
}

bool ShardSpec::any_partial() const {
  for (const Placement& p : placements_)
    if (p.is_partial()) return true;
  return false;
}

bool ShardSpec::any_shard() const {
  for (const Placement& p : placements_)
    if (p.is_shard()) return true;
  return false;
}

Shape ShardSpec::local_shape() const {
  Shape s = global_shape_;
  for (std::size_t m = 0; m < placements_.size(); ++m)
    if (placements_[m].is_shard()) s[placements_[m].dim] = extents_[m][mesh_.coords()[m]];
  return s;
}

Shape ShardSpec::local_shape_at(int axis, int coord) const {
  SHARDRT_CHECK(axis >= 0 && axis < mesh_.ndim() && coord >= 0 && coord < mesh_.shape()[axis], ValueError,
                "ShardSpec::local_shape_at: axis ", axis, " coordinate ", coord, " is not on ", mesh_.str());
  Shape s = local_shape();
  if (placements_[axis].is_shard()) s[placements_[axis].dim] = extents_[axis][coord];
  return s;
}

int64_t ShardSpec::offset(int axis) const {
  if (!placements_[axis].is_shard()) return 0;
  const auto& e = extents_[axis];
  return std::accumulate(e.begin(), e.begin() + mesh_.coords()[axis], int64_t{0});
}

ShardSpec ShardSpec::with(Placements placements, Shape global_shape, AxisExtents extents,
                          const char* op) const {
  return ShardSpec(mesh_, std::move(placements), std::move(global_shape), std::move(extents), op);
}

bool ShardSpec::operator==(const ShardSpec& o) const {
  return same_mesh(mesh_, o.mesh_) && placements_ == o.placements_ && global_shape_ == o.global_shape_ &&
         extents_ == o.extents_;
}

std::string ShardSpec::str() const {
  std::string s = "Spec(mesh (";
  for (int m = 0; m < mesh_.ndim(); ++m)
    s += detail::concat(m ? ", " : "", mesh_.axis_names()[m], "=", mesh_.shape()[m]);
  s += detail::concat("), ", placements_str(placements_), ", global ", shape_str(global_shape_));
  for (std::size_t m = 0; m < placements_.size(); ++m)
    if (placements_[m].is_shard())
      s += detail::concat(", ", placements_[m].str(), " extents ", extents_str(extents_[m]));
  return s + ")";
}

// A Mesh is a handle onto shared communicators: two handles are the same mesh exactly when they reach the same
// flat communicator object.
bool same_mesh(const Mesh& a, const Mesh& b) { return &a.flat() == &b.flat(); }

}  // namespace shardrt
