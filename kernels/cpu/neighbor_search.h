// Nearest-neighbour search of one block of points (n x d, f64, row-major) for a set of queries, merged into each
// query's running best list: the search kernel of knn and radius_search (patches/point_cloud.cpp), which calls it
// once per ring block. Exact and deterministic: a candidate enters when its squared distance (summed in dim order
// in f64) is <= radius2 and (d2, global index) is lexicographically below the list's last entry or the list holds
// fewer than k; so the lists after any sequence of blocks are the same whatever the blocks' order or split, and
// the same for both methods below, bit for bit.
//
// merge_block_indexed first skips, per query, the block when the distance from the query to the block's bounding
//   box exceeds its current bound (radius2, or the k-th best distance once the list is full: no point of the block
//   could enter), and the whole block (no index built) when no query needs it. The others search an index of the
//   block with that bound: a uniform cell grid (kernels/cpu/neighbor_grid.h; the default), or, with
//   SHARDRT_NEIGHBOR_INDEX=kdtree, a KD-tree (nanoflann, when the build found it; otherwise the brute-force loop).
//   Either prunes with a relative margin of 1e-12 against its own rounding, admits ties at the bound, and compares
//   every point it reaches exactly as above.
// merge_block_brute is the reference: every query against every point, O(nq * n * d).
// Both are O(nq * k) in memory besides the tree (O(n)); queries run in parallel (OpenMP), each list touched by
// one thread only.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace shardrt::kernels::cpu {

// Per query, its best (squared distance, global index) pairs, sorted ascending, at most k.
using NeighborLists = std::vector<std::vector<std::pair<double, int64_t>>>;

// What an indexed merge did: queries that searched the block, queries that skipped it by its bounding box.
struct BlockSearchStats {
  int64_t searched = 0, skipped = 0;
  bool tree_built = false;
};

// q: best.size() queries x d; pts: n points x d, global indices offset .. offset + n - 1; k >= 1; radius2 >= 0
// (+inf for knn).
void merge_block_brute(NeighborLists& best, const double* q, const double* pts, int64_t n, int64_t d, int64_t offset,
                       int64_t k, double radius2);
BlockSearchStats merge_block_indexed(NeighborLists& best, const double* q, const double* pts, int64_t n, int64_t d,
                                     int64_t offset, int64_t k, double radius2);

// Whether merge_block_indexed searches an index (the grid, or the KD-tree where nanoflann was found) rather than the
// brute-force loop.
bool neighbor_index_available();

}  // namespace shardrt::kernels::cpu
