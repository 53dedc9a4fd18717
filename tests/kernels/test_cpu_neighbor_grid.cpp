// The cell grid of the block search (kernels/cpu/neighbor_grid.h) against the brute force, bit for bit (indices and
// squared distances): uniform and clustered clouds, a flat cloud (one dim of zero extent), all points equal, 1-, 2-
// and 4-d points (the grid covers the first three dims), lattice points on the cell faces (ties), queries far
// outside the block, knn (no radius) and radius searches, lists that already hold entries from an earlier block,
// NaN coordinates (never admitted, as by the brute force), and blocks of 1-8 points.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/neighbor_search.h"

namespace cpu = shardrt::kernels::cpu;

namespace {

struct Cloud {
  int64_t n, d;
  std::vector<double> x;
};

Cloud uniform(int64_t n, int64_t d, uint64_t seed, double lo = 0, double hi = 1) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Cloud c{n, d, std::vector<double>(static_cast<size_t>(n * d))};
  for (double& v : c.x) v = u(g);
  return c;
}

// The indexed search (the grid by default) of pts for the queries, after `prior` (another block) went in first.
void check_grid(const Cloud& pts, const Cloud& q, int64_t k, double radius2, const Cloud* prior = nullptr) {
  cpu::NeighborLists want(static_cast<size_t>(q.n)), got(static_cast<size_t>(q.n));
  if (prior) {
    cpu::merge_block_brute(want, q.x.data(), prior->x.data(), prior->n, q.d, pts.n, k, radius2);
    cpu::merge_block_brute(got, q.x.data(), prior->x.data(), prior->n, q.d, pts.n, k, radius2);
  }
  cpu::merge_block_brute(want, q.x.data(), pts.x.data(), pts.n, q.d, 0, k, radius2);
  cpu::merge_block_indexed(got, q.x.data(), pts.x.data(), pts.n, q.d, 0, k, radius2);
  int64_t wrong = 0;
  for (int64_t i = 0; i < q.n; ++i) wrong += got[i] != want[i];
  INFO("queries whose list differs from the brute force: " << wrong << " of " << q.n);
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("cell grid search equals the brute force on uniform, clustered and degenerate clouds", "[kernels][cpu]") {
  REQUIRE(cpu::neighbor_index_available());
  const double inf = std::numeric_limits<double>::infinity();
  for (const int64_t k : {1, 8, 32}) {
    INFO("k " << k);
    const Cloud pts = uniform(3000, 3, 1), q = uniform(500, 3, 2, -0.2, 1.2);  // some queries outside the block
    check_grid(pts, q, k, inf);
    check_grid(pts, q, k, 0.05 * 0.05);
    check_grid(pts, q, k, 0.25 * 0.25);
    // A list that already holds entries from an earlier block (its bound is tight from the start).
    const Cloud prior = uniform(400, 3, 3);
    check_grid(pts, q, k, 0.2 * 0.2, &prior);
  }
  // Clustered: two tight blobs far apart (most cells empty), queries around both and between.
  Cloud blobs = uniform(2000, 3, 4, 0, 0.01);
  for (int64_t j = 1000; j < 2000; ++j) blobs.x[j * 3] += 10;
  Cloud around = uniform(200, 3, 5, -0.5, 10.5);
  check_grid(blobs, around, 8, inf);
  check_grid(blobs, around, 8, 1.0);
  // Flat: z = 0 for every point (one cell in z), and every point the same.
  Cloud flat = uniform(1500, 3, 6);
  for (int64_t j = 0; j < flat.n; ++j) flat.x[j * 3 + 2] = 0;
  check_grid(flat, uniform(300, 3, 7), 16, inf);
  Cloud same{50, 3, std::vector<double>(150, 0.25)};
  check_grid(same, uniform(20, 3, 8), 7, inf);
  check_grid(same, uniform(20, 3, 8), 60, 0.5);
  // Far queries: 1000 away from every point.
  check_grid(uniform(800, 3, 9), uniform(50, 3, 10, 1000, 1001), 4, inf);
}

TEST_CASE("cell grid search equals the brute force in 1, 2 and 4 dims and on lattice ties", "[kernels][cpu]") {
  const double inf = std::numeric_limits<double>::infinity();
  for (const int64_t d : {1, 2, 4}) {
    INFO("d " << d);
    check_grid(uniform(2000, d, 11 + d), uniform(300, d, 21 + d, -0.1, 1.1), 8, inf);
    check_grid(uniform(2000, d, 11 + d), uniform(300, d, 21 + d, -0.1, 1.1), 8, 0.01);
  }
  // Integer lattice points (repeated), many at equal distances and on cell faces; queries on and between sites.
  Cloud lattice{1200, 3, std::vector<double>(3600)};
  uint64_t s = 7;
  for (double& v : lattice.x) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<double>((s >> 33) % 6);
  }
  Cloud q = uniform(200, 3, 31, 0, 5);
  for (int64_t i = 0; i < 100; ++i)
    for (int c = 0; c < 3; ++c) q.x[i * 3 + c] = std::round(q.x[i * 3 + c]);
  for (const double r2 : {inf, 1.0, 2.0, 3.0})
    for (const int64_t k : {1, 6, 40}) check_grid(lattice, q, k, r2);
}

TEST_CASE("cell grid search never admits NaN, as the brute force", "[kernels][cpu]") {
  Cloud pts = uniform(600, 3, 41), q = uniform(40, 3, 42);
  pts.x[5 * 3 + 1] = std::numeric_limits<double>::quiet_NaN();
  q.x[3 * 3 + 0] = std::numeric_limits<double>::quiet_NaN();
  check_grid(pts, q, 8, std::numeric_limits<double>::infinity());
  check_grid(pts, q, 8, 0.04);
}

TEST_CASE("cell grid search equals the brute force on tiny blocks, one after another", "[kernels][cpu]") {
  // 1-8 points per block (the ring blocks of a few points a rank): dims narrower than a cell get one cell that must
  // still span the dim. Two blocks in a row, knn and radius, k below and above the points there are.
  int64_t wrong = 0;
  for (int seed = 0; seed < 400; ++seed) {
    std::mt19937_64 g(static_cast<uint64_t>(seed));
    std::normal_distribution<double> u(0, 0.7);
    const int64_t n1 = 1 + seed % 8, n2 = 1 + (seed / 8) % 8, nq = 9, k = seed % 3 == 0 ? 1 : seed % 3 == 1 ? 4 : 15;
    const double r2 = seed % 2 ? std::numeric_limits<double>::infinity() : 0.81;
    std::vector<double> a(static_cast<size_t>(3 * n1)), b(static_cast<size_t>(3 * n2)), q(3 * nq);
    for (double& x : a) x = u(g);
    for (double& x : b) x = u(g);
    for (double& x : q) x = u(g);
    cpu::NeighborLists want(nq), got(nq);
    cpu::merge_block_brute(want, q.data(), a.data(), n1, 3, 0, k, r2);
    cpu::merge_block_brute(want, q.data(), b.data(), n2, 3, n1, k, r2);
    cpu::merge_block_indexed(got, q.data(), a.data(), n1, 3, 0, k, r2);
    cpu::merge_block_indexed(got, q.data(), b.data(), n2, 3, n1, k, r2);
    for (int64_t i = 0; i < nq; ++i) wrong += got[i] != want[i];
  }
  CHECK(wrong == 0);
}
