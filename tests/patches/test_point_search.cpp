// The indexed block search of knn / radius_search (kernels/cpu/neighbor_search.h): on lattice points full of
// duplicates and equal distances (ties broken by global index, ties at the radius included) the KD-tree search
// equals an fp64 brute-force reference and the brute-force method bit for bit, on 1-4 ranks with uneven and
// zero-size shards; and a block whose bounding box is out of every query's reach is skipped without a tree.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/neighbor_search.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// Integer lattice points in [0, 4)^3 (exact squared distances: many ties, and duplicates), from a fixed LCG.
Tensor lattice(int64_t n, uint64_t seed, double shift) {
  std::vector<double> v(static_cast<size_t>(3 * n));
  uint64_t s = seed;
  for (double& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<double>((s >> 33) % 4) + shift;
  }
  return from_vector(v, {n, 3}, {DType::f64});
}

// The reference: every pair in fp64, sorted by (squared distance, index), within the radius, the first k.
void reference(const Tensor& points, const Tensor& queries, int64_t k, double radius2, std::vector<double>& index,
               std::vector<double>& dist) {
  const std::vector<double> p = points.to_vector(), q = queries.to_vector();
  const int64_t np = points.size(0), nq = queries.size(0);
  for (int64_t i = 0; i < nq; ++i) {
    std::vector<std::pair<double, int64_t>> all;
    for (int64_t j = 0; j < np; ++j) {
      double s = 0;
      for (int64_t c = 0; c < 3; ++c) s += (q[i * 3 + c] - p[j * 3 + c]) * (q[i * 3 + c] - p[j * 3 + c]);
      if (s <= radius2) all.push_back({s, j});
    }
    std::sort(all.begin(), all.end());
    for (int64_t j = 0; j < k; ++j) {
      const bool valid = j < static_cast<int64_t>(all.size());
      index.push_back(valid ? static_cast<double>(all[j].second) : -1.0);
      dist.push_back(valid ? std::sqrt(all[j].first) : INFINITY);
    }
  }
}

// Same indices and the same distance bits.
void check_equal(const Neighbors& got, const std::vector<double>& index, const std::vector<double>& dist) {
  const std::vector<double> gi = full_tensor(got.index).to_vector(), gd = full_tensor(got.distance).to_vector();
  REQUIRE(gi.size() == index.size());
  int64_t wrong = 0;
  for (size_t i = 0; i < gi.size(); ++i)
    if (gi[i] != index[i] || !(gd[i] == dist[i] || (std::isinf(gd[i]) && std::isinf(dist[i])))) ++wrong;
  INFO("entries differing from the reference: " << wrong << " of " << gi.size());
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("patch knn / radius_search: the KD-tree equals the brute force on ties and duplicates", "[point_cloud]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  // 400 points in 64 lattice sites (every site about six times), queries on the sites and between them.
  const Tensor points = lattice(400, 7, 0.0);
  const Tensor queries = cat({lattice(40, 11, 0.0), lattice(40, 13, 0.5)}, 0);
  std::vector<ExtentsCase> cases = extents_cases(400, p);
  if (p >= 2) {
    Extents thin(p, 1);  // shards of one point, the rest on the last rank
    thin[p - 1] = 400 - (p - 1);
    cases.push_back({"shards of one", thin});
  }
  for (const ExtentsCase& e : cases) {
    const ShardTensor pts = distribute(points, line, on_line(S(0)), {{e.extents}});
    const ShardTensor qs = distribute(queries, line, on_line(S(0)));
    for (int64_t k : {1, 7, 16}) {
      INFO("knn k " << k << ", points " << e.name);
      std::vector<double> index, dist;
      reference(points, queries, k, INFINITY, index, dist);
      check_equal(knn(pts, qs, k), index, dist);
      check_equal(knn(pts, qs, k, NeighborSearch::brute_force), index, dist);
    }
    // Radius 1 and sqrt(2) hit lattice distances exactly: the points at the radius are in.
    for (double radius : {0.0, 1.0, std::sqrt(2.0), 1.7}) {
      INFO("radius " << radius << ", points " << e.name);
      std::vector<double> index, dist;
      reference(points, queries, 16, radius * radius, index, dist);
      check_equal(radius_search(pts, qs, radius, 16), index, dist);
      check_equal(radius_search(pts, qs, radius, 16, NeighborSearch::brute_force), index, dist);
    }
  }
}

TEST_CASE("patch knn / radius_search: far ring blocks are skipped by their bounding box", "[point_cloud]") {
  // Kernel level: a block 100 away from every query, after a near block has filled every knn list.
  const Tensor near = lattice(50, 21, 0.0), far = add_scalar(lattice(50, 23, 0.0), 100.0);
  const Tensor q = lattice(10, 25, 0.5);
  const std::vector<double> qv = q.to_vector(), nv = near.to_vector(), fv = far.to_vector();
  using kernels::cpu::BlockSearchStats;
  using kernels::cpu::merge_block_indexed;
  {
    kernels::cpu::NeighborLists best(10);
    const BlockSearchStats a = merge_block_indexed(best, qv.data(), nv.data(), 50, 3, 0, 4, INFINITY);
    CHECK(a.searched == 10);
    CHECK(a.tree_built == kernels::cpu::neighbor_index_available());
    const BlockSearchStats b = merge_block_indexed(best, qv.data(), fv.data(), 50, 3, 50, 4, INFINITY);
    CHECK(b.searched == 0);
    CHECK(b.skipped == 10);
    CHECK_FALSE(b.tree_built);
    for (const auto& list : best) {
      REQUIRE(list.size() == 4);
      CHECK(list.back().second < 50);  // nothing from the far block
    }
  }
  {
    // Radius search: the far block is out of the radius of every query before any list is full.
    kernels::cpu::NeighborLists best(10);
    const BlockSearchStats b = merge_block_indexed(best, qv.data(), fv.data(), 50, 3, 0, 4, 2.0);
    CHECK(b.skipped == 10);
    CHECK_FALSE(b.tree_built);
    // A far query (101.5, ...) needs the far block: it is searched, the near queries skip it.
    std::vector<double> mixed = qv;
    for (int c = 0; c < 3; ++c) mixed[c] += 100.0;
    kernels::cpu::NeighborLists best2(10);
    const BlockSearchStats m = merge_block_indexed(best2, mixed.data(), fv.data(), 50, 3, 0, 4, 2.0);
    CHECK(m.searched == 1);
    CHECK(m.skipped == 9);
    CHECK_FALSE(best2[0].empty());
  }
  // Sharded: every rank's points a cluster of its own, 100 apart; the queries next to each cluster. The far
  // blocks are skipped and the results are still the serial ones.
  const Mesh& line = line_mesh();
  const int p = line.size();
  std::vector<Tensor> clusters, qclusters;
  for (int j = 0; j < p; ++j) {
    clusters.push_back(add_scalar(lattice(30, 31 + j, 0.0), 100.0 * j));
    qclusters.push_back(add_scalar(lattice(5, 41 + j, 0.5), 100.0 * j));
  }
  const Tensor points = cat(clusters, 0), queries = cat(qclusters, 0);
  const ShardTensor pts = distribute(points, line, on_line(S(0)), {{Extents(p, 30)}});
  const ShardTensor qs = distribute(queries, line, on_line(S(0)), {{Extents(p, 5)}});
  std::vector<double> index, dist;
  reference(points, queries, 8, INFINITY, index, dist);
  check_equal(knn(pts, qs, 8), index, dist);
  index.clear();
  dist.clear();
  reference(points, queries, 8, 1.5 * 1.5, index, dist);
  check_equal(radius_search(pts, qs, 1.5, 8), index, dist);
}
