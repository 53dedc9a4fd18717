// Point-cloud neighbour search with sharded points (patches/point_cloud.cpp): k nearest neighbours and ball
// query (radius search with a maximum neighbour count), indices in GLOBAL numbering, plus the differentiable
// gather of neighbour features from a sharded feature tensor.
#pragma once
#include <cstdint>

#include "patches/shard_tensor.h"

namespace shardrt {

// Neighbours of each query, ordered by distance, then by global point index (deterministic on any mesh).
struct Neighbors {
  ShardTensor index;     // i64 (Nq, k): global point indices; -1 where a query has fewer than k neighbours
  ShardTensor distance;  // points' dtype (Nq, k): Euclidean distances (computed in f64); +inf where index is -1
  ShardTensor count;     // i64 (Nq): the number of valid neighbours of each query
};

// points (Np, D), queries (Nq, D), same float dtype and mesh. Placements: points Shard(0) on at most one axis A
// (the ring axis) and Replicate elsewhere; queries Shard(0) or Replicate on every axis. Results are placed like
// the queries (no grad).
Neighbors knn(const ShardTensor& points, const ShardTensor& queries, int64_t k);
// Ball query: the (at most max_points) nearest points with distance <= radius.
Neighbors radius_search(const ShardTensor& points, const ShardTensor& queries, double radius, int64_t max_points);

// Neighbour features: features (Np, C...) placed like the points of the search, neighbours an i64 (Nq, k)
// result of knn/radius_search -> (Nq, k, C...) placed like the neighbours; entries -1 give zero rows. The grads
// are scatter-added back into the shards that own the points (gather_global in patches/norm_index.h).
ShardTensor gather_neighbor_features(const ShardTensor& features, const ShardTensor& neighbors);

}  // namespace shardrt
