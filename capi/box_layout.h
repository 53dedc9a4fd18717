// What the ranks' boxes of one sharded tensor say about its layout (shardrt_sharded_create and _create_points): the
// table of every rank's box (gathered by the caller) in, the model-facing global shape, placements and extents out.
// Every rank reads the same table, so every rank reaches the same verdict and throws the same ShapeError.
//
// A domain group's boxes either tile the sample's box exactly (split along one dim, or a point set flattened from
// blocks), or each of them is the whole sample box: a replicated tensor (a time value, a class output).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "patches/shard_spec.h"

namespace shardrt::capi {

constexpr int kMaxBoxDims = 8;

// One rank's statement: its box [off, off + n) of a global tensor of shape `global`.
struct Box {
  int ndim = 0;
  int64_t global[kMaxBoxDims] = {}, off[kMaxBoxDims] = {}, n[kMaxBoxDims] = {};

  std::string global_str() const { return list(global, 0, ndim); }
  // "[o0, o0+n0) x [o1, o1+n1) ..." of dims from..ndim-1
  std::string box_str(int from) const;
  int64_t volume(int from) const;
  // Dims 1.. are [0, global): this rank holds its samples whole.
  bool whole_sample() const;
  static std::string list(const int64_t* v, int from, int to);
};

struct BoxLayout {
  Shape global;
  int domain_dim = -1;     // the dim sharded over the domain axis; -1: replicated over it
  bool flattened = false;  // dims 1..ndim-2 flattened into points
  Extents ddp_extents, domain_extents;
};

// `boxes` holds one box per mesh rank (rank = ddp index * domain + domain index). `points`: the grid dims
// 1..ndim-2 become one point dim (shardrt_sharded_create_points). `fn` names the call in errors.
BoxLayout analyse_boxes(const std::vector<Box>& boxes, int ddp, int domain, bool points, const char* fn);

}  // namespace shardrt::capi
