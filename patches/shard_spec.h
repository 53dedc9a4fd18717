// ShardSpec: the global view of a sharded tensor — its mesh, one placement per mesh axis, the global shape,
// and the extent of every rank along each sharded dim. Everything about other ranks' shards is known locally:
// no op ever needs a metadata collective.
//
// A tensor dim may be sharded by at most one mesh axis, so the extents of axis m (sharding dim d) are the
// extents of dim d for the ranks at coordinates 0..size(m)-1 along m, whatever their other coordinates (the
// cross-section rule reduces to this when no dim is sharded twice).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mesh/mesh.h"
#include "patches/placement.h"
#include "runtime/shape.h"

namespace shardrt {

// The extents of one sharded dim, one per coordinate of the mesh axis sharding it (in coordinate order), and
// those of every mesh axis of a spec (empty for an axis that shards nothing).
using Extents = std::vector<int64_t>;
using AxisExtents = std::vector<Extents>;

// The one split rule used for every computed extent, metadata and data alike: `size` elements over `n` ranks,
// the first size % n ranks get one more (10 over 4 -> 3,3,2,2; 3 over 4 -> 1,1,1,0).
Extents split_extents(int64_t size, int n);
// The global extent the per-coordinate extents add up to.
int64_t total(const Extents& extents);

class ShardSpec {
 public:
  // `extents[m]` lists the per-coordinate extents for every Shard axis m (and is empty for other axes; an empty
  // outer vector means "no extents" and suits specs without Shard axes); they must be non-negative and sum to
  // global_shape[d]. Negative Shard dims are wrapped. Throws ValueError (placements: count, dim out of range,
  // a dim sharded twice; negative extents) or ShapeError (extents that do not fit the shape), the message
  // starting with `op` and naming the placements, the global shape and the mesh.
  ShardSpec(Mesh mesh, Placements placements, Shape global_shape, AxisExtents extents,
            const char* op = "ShardSpec");
  // Extents from split_extents for every Shard axis.
  static ShardSpec split_evenly(Mesh mesh, Placements placements, Shape global_shape, const char* op = "ShardSpec");

  const Mesh& mesh() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  const Placement& placement(int axis) const { return placements_[axis]; }
  const Shape& global_shape() const { return global_shape_; }
  int ndim() const { return static_cast<int>(global_shape_.size()); }
  // Per-coordinate extents along mesh axis `axis` (empty unless it is a Shard axis).
  const Extents& extents(int axis) const { return extents_[axis]; }
  const AxisExtents& all_extents() const { return extents_; }
  // The mesh axis sharding tensor dim d, or -1.
  int axis_sharding(int d) const;
  bool any_partial() const;
  bool any_shard() const;

  // This rank's local shape, and the local shape of the rank whose coordinate along `axis` is `coord` (other
  // coordinates as this rank's).
  Shape local_shape() const;
  Shape local_shape_at(int axis, int coord) const;
  // Start of this rank's slice of the dim sharded by `axis` (0 for non-Shard axes).
  int64_t offset(int axis) const;

  // The same spec with other placements/extents/global shape (validated again).
  ShardSpec with(Placements placements, Shape global_shape, AxisExtents extents,
                 const char* op = "ShardSpec") const;

  bool operator==(const ShardSpec& o) const;
  bool operator!=(const ShardSpec& o) const { return !(*this == o); }
  std::string str() const;  // "Spec(mesh (ddp=2, domain=2), (R, S(1)), global [4, 10], S(1) extents 3,3,2,2)"

 private:
  Mesh mesh_;
  Placements placements_;
  Shape global_shape_;
  AxisExtents extents_;
};

// True when both tensors live on the same mesh (the same communicators).
bool same_mesh(const Mesh& a, const Mesh& b);

}  // namespace shardrt
