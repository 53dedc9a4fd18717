// ShardTensor: this rank's local Tensor plus the ShardSpec that says what it is a piece of.
//
// Autograd runs on the local tensors: every sharded op is a local op (see autograd/function.h) whose forward and
// backward contain its collectives explicitly, and every rank records the same nodes in the same order, so one
// backward() call per rank runs the collectives of the backward in lock-step.
//
// Grad convention (the invariant every patch keeps): the grad of a Shard tensor is this rank's slice of the
// complete grad; the grad of a Replicate tensor is the complete grad, identical on every rank of the axis; a
// grad is never Partial. A patch that produces a partial contribution to the grad of a Replicate input (a
// weight meeting sharded activations, K/V meeting sharded queries) sums it over the axis itself, exactly once,
// in >= fp32. Consequence for redistribute's adjoints: Shard->Replicate (all-gather) has the slice as adjoint,
// Replicate->Shard (slice) has the all-gather, Partial->Replicate (all-reduce) has the identity,
// Partial->Shard (reduce-scatter) has the all-gather, and Shard(d)->Shard(d) to other extents (all_to_all_v) has
// the reverse all_to_all_v.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "patches/shard_spec.h"
#include "runtime/tensor.h"

namespace shardrt {

class ShardTensor {
 public:
  ShardTensor() = default;
  // Throws ShapeError when local.shape() != spec.local_shape().
  ShardTensor(Tensor local, ShardSpec spec);

  bool defined() const { return spec_.has_value(); }
  const Tensor& local() const { return local_; }
  const ShardSpec& spec() const { return *spec_; }
  const Mesh& mesh() const { return spec_->mesh(); }
  const Placements& placements() const { return spec_->placements(); }
  const Shape& global_shape() const { return spec_->global_shape(); }
  int dim() const { return spec_->ndim(); }
  DType dtype() const { return local_.dtype(); }
  Device device() const { return local_.device(); }
  std::string str() const;  // "ShardTensor(f64 global [4, 10] local [4, 3], (R, S(1)))"

 private:
  Tensor local_;
  std::optional<ShardSpec> spec_;
};

// ---- construction and extraction (all differentiable through the local tensors) --------------------------
// Every rank holds `full` (identical values): each keeps its own slice (split_extents, or the `extents` given,
// one vector per mesh axis as in ShardSpec); no communication. The local tensor is a differentiable (contiguous)
// slice of `full`: its grad flows back into `full`'s grad on each rank, as zeros outside this rank's window.
// Partial placements are rejected (MissingShardPatch).
ShardTensor distribute(const Tensor& full, const Mesh& mesh, const Placements& placements,
                       std::optional<AxisExtents> extents = std::nullopt);
// `full` is significant on mesh rank `src` only (others may pass an undefined Tensor): its shape, dtype,
// device kind and requires_grad are broadcast over the flat communicator, then `src` sends each rank only its
// own shard (point to point; the full tensor is never broadcast). Shards land on the mesh's device when `full`
// is on a GPU, on the CPU otherwise. Backward gathers the shard grads back to `src` (one copy of each distinct
// shard; other ranks get no grad). Every rank records the node, so every rank must call backward. Partial
// placements are rejected (MissingShardPatch).
ShardTensor scatter(const Tensor& full, int src, const Mesh& mesh, const Placements& placements);
// The same, for a caller that only knows the layout once it knows the shape (a model reading its inputs from a file
// on rank `src`): every rank calls `layout_for` with the broadcast global shape and must get the same answer; empty
// extents mean split_extents. The extents may be uneven or zero-size.
struct ScatterLayout {
  Placements placements;
  AxisExtents extents;
};
using ScatterLayoutFor = std::function<ScatterLayout(const Shape& global_shape)>;
ShardTensor scatter(const Tensor& full, int src, const Mesh& mesh, const ScatterLayoutFor& layout_for);
// Options of from_local. Partial is a pending sum that only sharded ops produce; wrapping rank-distinct parts as
// one is an explicit decision, so it must be asked for.
struct FromLocalOptions {
  bool allow_partial = false;  // false: a Partial placement is a ValueError naming the placements
};
// Wraps a local tensor without copying; its autograd identity is kept (grads reach `local` directly).
// With `extents` (one vector per mesh axis, empty for non-Shard axes: any caller decomposition, zero-size shards
// included) no collective runs, unless checked mode is on (mesh/check_mode.h: SHARDRT_COMM_CHECK=1 or
// CommOptions::check_collectives on the mesh's flat communicator, which the test suite runs with): then the ranks
// all-gather what each stated (placements, extents, local shape; one fixed-size i64 record per rank over the flat
// communicator, like the signature check NOT counted in the ledger) and every rank raises the same ShapeError
// when the ranks stated different extents (naming the ranks and both extent lists, e.g. rank 3 stating 3,3,3,4
// where ranks 0, 1, 2 state 3,3,3,3) or a rank's local shape does not fit them. Without checked mode, stated
// extents are trusted and a local shape that does not match them is a ShapeError on the ranks where it does not.
// Without `extents`, when some axis is Shard, one all-gather of every rank's local shape over the flat
// communicator (counted, scope "from_local"): every rank then validates all shapes against each other (sharded
// dims consistent along each axis, other dims equal everywhere) and reaches the same verdict, so inconsistent
// shapes are the same ShapeError on every rank. Partial placements need opts.allow_partial.
ShardTensor from_local(const Tensor& local, const Mesh& mesh, const Placements& placements,
                       std::optional<AxisExtents> extents = std::nullopt, FromLocalOptions opts = {});
// The local tensor (its autograd identity; Partial data is returned unreduced).
inline Tensor to_local(const ShardTensor& t) { return t.local(); }
// The whole global tensor on every rank: redistribute to all-Replicate, then the local tensor.
Tensor full_tensor(const ShardTensor& t);
// One hop per changed mesh axis; each hop is a differentiable op with its collective and its adjoint (see above
// and patches/redistribute.cpp). Partial targets are rejected (MissingShardPatch); an identical target returns
// `t` itself. New Shard axes get split_extents; an axis keeping its placement keeps its extents.
ShardTensor redistribute(const ShardTensor& t, const Placements& placements);
// To caller-given extents too (one vector per mesh axis, as in ShardSpec). An axis sharding the same dim with
// other extents is one all_to_all_v on that axis (its adjoint the reverse all_to_all_v).
ShardTensor redistribute(const ShardTensor& t, const Placements& placements, const AxisExtents& extents);
// To `target`'s placements and extents; the same mesh and global shape are required (ShapeError naming both
// specs otherwise). See also align_to (patches/align.h).
ShardTensor redistribute(const ShardTensor& t, const ShardSpec& target);

// ---- backward from a sharded root ---------------------------------------------------------------------------
// Seeds backward with `grad` given as the complete global grad (identical on every rank): each rank uses its
// slice for Shard axes and all of it for Replicate/Partial axes.
void backward_global(const ShardTensor& root, const Tensor& global_grad, bool retain_graph = false);
// Several roots in one backward pass (one global grad per root), e.g. every output of a multi-output op.
void backward_global(const std::vector<ShardTensor>& roots, const std::vector<Tensor>& global_grads,
                     bool retain_graph = false);

}  // namespace shardrt
