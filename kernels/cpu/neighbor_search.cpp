// The block search of knn / radius_search (kernels/cpu/neighbor_search.h): a brute-force reference and a
// KD-tree (nanoflann) with bounding-box skipping, both merging exactly by (squared distance, global index).
#include "kernels/cpu/neighbor_search.h"
#include "kernels/neighbor_search_config.h"  // generated: SHARDRT_WITH_NANOFLANN
#include "kernels/cpu/neighbor_grid.h"
#include "kernels/cpu/neighbor_rules.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#if SHARDRT_WITH_NANOFLANN
#include <nanoflann.hpp>
#endif

namespace shardrt::kernels::cpu {

using namespace neighbor_rules;

namespace {

#if SHARDRT_WITH_NANOFLANN
// The block as nanoflann's dataset: row-major n x d doubles.
struct BlockPoints {
  const double* pts;
  int64_t n, d;
  size_t kdtree_get_point_count() const { return static_cast<size_t>(n); }
  double kdtree_get_pt(size_t i, size_t c) const { return pts[static_cast<int64_t>(i) * d + static_cast<int64_t>(c)]; }
  template <class Box>
  bool kdtree_get_bbox(Box&) const {
    return false;
  }
};

// The tree's metric: dist2 itself (so the tree's distances are the merge's, bit for bit).
struct ExactL2 {
  using ElementType = double;
  using DistanceType = double;
  const BlockPoints& data;
  explicit ExactL2(const BlockPoints& points) : data(points) {}
  double evalMetric(const double* a, size_t b, size_t size) const {
    return dist2(a, data.pts + static_cast<int64_t>(b) * data.d, static_cast<int64_t>(size));
  }
  template <typename U, typename V>
  double accum_dist(const U a, const V b, size_t) const {
    return (a - b) * (a - b);
  }
};

using Tree = nanoflann::KDTreeSingleIndexAdaptor<ExactL2, BlockPoints, -1, size_t>;

// nanoflann's result-set interface over one query's list: the tree admits points strictly below worstDist(), so
// the bound is widened by a relative 1e-12 (ties at the bound, and the rounding of the tree's incremental box
// distances, are then admitted); offer() decides exactly.
struct ListResult {
  List& list;
  int64_t k, offset;
  double radius2;
  double worstDist() const {
    const double b = bound(list, k, radius2);
    return std::isinf(b) ? b : b * (1 + 1e-12) + std::numeric_limits<double>::min();
  }
  bool addPoint(double d2, size_t i) {
    offer(list, d2, offset + static_cast<int64_t>(i), k, radius2);
    return true;
  }
  bool full() const { return static_cast<int64_t>(list.size()) == k; }
  size_t size() const { return list.size(); }
};
#endif

// The cell grid unless SHARDRT_NEIGHBOR_INDEX=kdtree (read once: the side-by-side measurement against the tree).
bool use_grid() {
  static const bool grid = [] {
    const char* env = std::getenv("SHARDRT_NEIGHBOR_INDEX");
    return !(env && std::string(env) == "kdtree");
  }();
  return grid;
}

}  // namespace

bool neighbor_index_available() {
#if SHARDRT_WITH_NANOFLANN
  return true;
#else
  return use_grid();
#endif
}

void merge_block_brute(NeighborLists& best, const double* q, const double* pts, int64_t n, int64_t d, int64_t offset,
                       int64_t k, double radius2) {
  const int64_t nq = static_cast<int64_t>(best.size());
#pragma omp parallel for schedule(dynamic, 64) if (nq * n > 65536)
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < n; ++j) offer(best[i], dist2(q + i * d, pts + j * d, d), offset + j, k, radius2);
}

BlockSearchStats merge_block_indexed(NeighborLists& best, const double* q, const double* pts, int64_t n, int64_t d,
                                     int64_t offset, int64_t k, double radius2) {
  BlockSearchStats stats;
  const int64_t nq = static_cast<int64_t>(best.size());
  if (n == 0 || nq == 0) return stats;
  // The block's bounding box; a query whose distance to it exceeds its bound skips the block.
  std::vector<double> lo(pts, pts + d), hi(pts, pts + d);
  for (int64_t j = 1; j < n; ++j)
    for (int64_t c = 0; c < d; ++c) {
      lo[c] = std::min(lo[c], pts[j * d + c]);
      hi[c] = std::max(hi[c], pts[j * d + c]);
    }
  std::vector<char> needs(static_cast<size_t>(nq), 0);
  for (int64_t i = 0; i < nq; ++i) {
    needs[i] = !(box_dist2(q + i * d, lo.data(), hi.data(), d) > bound(best[i], k, radius2));
    stats.searched += needs[i];
  }
  stats.skipped = nq - stats.searched;
  if (stats.searched == 0) return stats;
  if (use_grid()) {
    const CellGrid grid(pts, n, d, offset, k);
    stats.tree_built = true;
    // The queries that need the block, in the order of their cells (neighbouring queries read the same points);
    // each list is still one query's own, so the order changes no result.
    std::vector<std::pair<int64_t, int64_t>> order;
    order.reserve(static_cast<size_t>(stats.searched));
    for (int64_t i = 0; i < nq; ++i)
      if (needs[i]) order.push_back({grid.home_cell(q + i * d), i});
    std::sort(order.begin(), order.end());
    const int64_t m = static_cast<int64_t>(order.size());
#pragma omp parallel for schedule(dynamic, 256) if (m > 1024)
    for (int64_t j = 0; j < m; ++j) grid.search(best[order[j].second], q + order[j].second * d, k, radius2);
    return stats;
  }
#if SHARDRT_WITH_NANOFLANN
  const BlockPoints block{pts, n, d};
  Tree tree(static_cast<int>(d), block, nanoflann::KDTreeSingleIndexAdaptorParams(16));
  stats.tree_built = true;
  const nanoflann::SearchParams params;
#pragma omp parallel for schedule(dynamic, 256) if (nq > 1024)
  for (int64_t i = 0; i < nq; ++i) {
    if (!needs[i]) continue;
    ListResult result{best[i], k, offset, radius2};
    tree.findNeighbors(result, q + i * d, params);
  }
#else
#pragma omp parallel for schedule(dynamic, 64) if (nq * n > 65536)
  for (int64_t i = 0; i < nq; ++i)
    if (needs[i])
      for (int64_t j = 0; j < n; ++j) offer(best[i], dist2(q + i * d, pts + j * d, d), offset + j, k, radius2);
#endif
  return stats;
}

}  // namespace shardrt::kernels::cpu
