// kNN and radius search with sharded points (a ring over the point shards) and sharded or replicated queries:
// results equal to a serial brute force over the full set (indices exactly, distances to 1e-12) with uneven and
// zero-size shards, the exact ring shifts, and the differentiable gather of neighbour features against the
// serial fp64 oracle.
#include <algorithm>
#include <cmath>

#include "tests/patches/patch_testing.h"
#include "tests/support/cuda_skip.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

struct Brute {
  std::vector<int64_t> index;  // (nq, k), -1 padded
  std::vector<double> dist;
  std::vector<int64_t> count;
};

// The serial oracle: every pair, sorted by (squared distance, index), filtered by the radius, first k.
Brute brute_force(const Tensor& points, const Tensor& queries, int64_t k, double radius) {
  const std::vector<double> p = points.to_vector(), q = queries.to_vector();
  const int64_t d = points.size(1), np = points.size(0), nq = queries.size(0);
  Brute b;
  for (int64_t i = 0; i < nq; ++i) {
    std::vector<std::pair<double, int64_t>> all;
    for (int64_t j = 0; j < np; ++j) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) s += (q[i * d + c] - p[j * d + c]) * (q[i * d + c] - p[j * d + c]);
      if (s <= radius * radius) all.push_back({s, j});
    }
    std::sort(all.begin(), all.end());
    b.count.push_back(std::min<int64_t>(k, static_cast<int64_t>(all.size())));
    for (int64_t j = 0; j < k; ++j) {
      b.index.push_back(j < static_cast<int64_t>(all.size()) ? all[j].second : -1);
      b.dist.push_back(j < static_cast<int64_t>(all.size()) ? std::sqrt(all[j].first) : INFINITY);
    }
  }
  return b;
}

void check_same(const Neighbors& got, const Brute& want) {
  const std::vector<double> idx = full_tensor(got.index).to_vector(), dist = full_tensor(got.distance).to_vector(),
                            cnt = full_tensor(got.count).to_vector();
  bool same = idx.size() == want.index.size() && cnt.size() == want.count.size();
  double err = 0;
  for (size_t i = 0; same && i < idx.size(); ++i) {
    same = same && static_cast<int64_t>(idx[i]) == want.index[i];
    if (want.index[i] >= 0) err = std::max(err, std::abs(dist[i] - want.dist[i]));
    else same = same && std::isinf(dist[i]);
  }
  for (size_t i = 0; same && i < cnt.size(); ++i) same = same && static_cast<int64_t>(cnt[i]) == want.count[i];
  CHECK(same);
  CHECK(err <= 1e-12);
}

// The ring's ledger line (none on one rank: no shift is issued).
std::vector<ExpectedComm> ring(const char* scope, const char* axis, int p, int64_t bytes) {
  if (p == 1) return {};
  return {{scope, "ring_shift", axis, p - 1, bytes}};
}

// Ring bytes sent by coordinate `me` of an axis with point extents `ext` and D coordinates in f64.
int64_t ring_bytes(const Extents& ext, int me, int64_t d) {
  const int p = static_cast<int>(ext.size());
  int64_t b = 0;
  for (int s = 0; s + 1 < p; ++s) b += ext[((me - s) % p + p) % p] * d * 8;
  return b;
}

// Points on a coarse lattice plus noise, so that neighbourhoods are non-trivial; some exact duplicates so that
// equal distances are broken by the global index.
Tensor cloud(int64_t n, uint64_t seed) {
  Tensor t = mul_scalar(rnd({n, 3}, seed), 0.7);
  if (n > 4) t.narrow(0, n - 1, 1).copy_(t.narrow(0, 1, 1));
  return t;
}

}  // namespace

TEST_CASE("patch knn / radius_search: ring over point shards equals serial brute force", "[point_cloud]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), me = line.axis("domain").rank();
  const Tensor points = cloud(13, 100), queries = cloud(9, 101);
  const double radius = 0.9;
  for (const ExtentsCase& e : extents_cases(13, p)) {
    const ShardTensor pts = distribute(points, line, on_line(Placement::Shard(0)), {{e.extents}});
    for (const Placement& qp : {Placement::Shard(0), Placement::Replicate()}) {
      INFO("points " << e.name << ", queries " << qp.str());
      // Queries: the last extents case (a zero-size query shard from 3 ranks on) or replicated.
      const ShardTensor qs = qp.is_shard() ? distribute(queries, line, on_line(qp), {{extents_cases(9, p).back().extents}})
                                           : distribute(queries, line, on_line(qp));
      for (int64_t k : {1, 4, 15}) {  // 15 > 13 points: padded
        line.flat().ledger().reset();
        const Neighbors nb = knn(pts, qs, k);
        check_ledger(line, ring("knn.forward", "domain", p, ring_bytes(e.extents, me, 3)));
        CHECK(nb.index.placements() == qs.placements());
        check_same(nb, brute_force(points, queries, k, INFINITY));
      }
      line.flat().ledger().reset();
      const Neighbors rb = radius_search(pts, qs, radius, 5);
      check_ledger(line, ring("radius_search.forward", "domain", p, ring_bytes(e.extents, me, 3)));
      check_same(rb, brute_force(points, queries, 5, radius));
    }
  }
  // Replicated points: local, no collective, with sharded queries.
  line.flat().ledger().reset();
  const ShardTensor rp = distribute(points, line, on_line(Placement::Replicate()));
  const ShardTensor sq = distribute(queries, line, on_line(Placement::Shard(0)));
  const Neighbors local = knn(rp, sq, 3);
  check_ledger(line, {});
  check_same(local, brute_force(points, queries, 3, INFINITY));
  if (has_grid()) {
    // Points over dx (zero-size shard included), queries over dy.
    const Mesh& grid = grid_mesh();
    for (const Extents& ext : {split_extents(13, 2), Extents{0, 13}}) {
      const ShardTensor gp = distribute(points, grid, {Placement::Shard(0), Placement::Replicate()}, {{ext, {}}});
      const ShardTensor gq = distribute(queries, grid, {Placement::Replicate(), Placement::Shard(0)});
      grid.flat().ledger().reset();
      const Neighbors nb = knn(gp, gq, 4);
      check_ledger(grid, {{"knn.forward", "ring_shift", "dx", 1, ring_bytes(ext, grid.axis("dx").rank(), 3)}});
      check_same(nb, brute_force(points, queries, 4, INFINITY));
    }
  }
}

TEST_CASE("patch point cloud: neighbour features gathered from the owning shards, grads scatter-added back",
          "[point_cloud]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const Tensor points = cloud(13, 102), queries = cloud(9, 103);
  // The search runs on the points laid out like the features (same extents), then the features are gathered.
  auto fn = [points, queries](bool ball) {
    return [points, queries, ball](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      const ShardTensor& f = in[0];
      const ShardTensor pts = distribute(points, f.mesh(), f.placements(), f.spec().all_extents());
      const ShardTensor qs = distribute(queries, f.mesh(), f.placements());
      const Neighbors nb = ball ? radius_search(pts, qs, 0.9, 4) : knn(pts, qs, 3);
      return std::vector<ShardTensor>{gather_neighbor_features(f, nb.index)};
    };
  };
  for (const ExtentsCase& e : extents_cases(13, p))
    for (bool ball : {false, true}) {
      ShardedCase c = sharded_case(std::string(ball ? "radius" : "knn") + " features " + e.name, {rnd({13, 2}, 104)},
                                   {on_line(Placement::Shard(0))}, {{e.extents}});
      line.flat().ledger().reset();
      const ShardedCheckResult r = check_sharded(line, fn(ball), c);
      INFO(r.report);
      CHECK(r.ok);
      // One backward all_to_all_v of the grad rows to their owners, nothing else in backward.
      int64_t bwd = 0;
      for (const LedgerEntry& le : line.flat().ledger().entries())
        if (le.scope.rfind("gather_global.backward", 0) == 0) bwd += le.calls;
      CHECK(bwd == 1);
      // And every line exact: the search's ring, then gather_global's request phase and rows (the queries, so
      // the index, split by the split rule; rows of 2 f64 features).
      const std::vector<int64_t>& nbr = brute_force(points, queries, ball ? 4 : 3, ball ? 0.9 : INFINITY).index;
      const int64_t k = ball ? 4 : 3;
      const Extents q_ext = split_extents(9, p);
      const int me = line.axis("domain").rank();
      int64_t asked = 0, served = 0, first = 0;
      for (int j = 0; j < p; ++j) {
        for (int64_t i = first * k; i < (first + q_ext[j]) * k; ++i) {
          if (nbr[i] < 0) continue;
          int owner = 0;
          for (int64_t end = e.extents[0]; nbr[i] >= end; end += e.extents[owner]) ++owner;
          if (j == me && owner != me) ++asked;
          if (j != me && owner == me) ++served;
        }
        first += q_ext[j];
      }
      std::vector<ExpectedComm> want = ring(ball ? "radius_search.forward" : "knn.forward", "domain", p,
                                            ring_bytes(e.extents, me, 3));
      want.push_back({"gather_global.forward", "agree", "domain", 1, p - 1});
      want.push_back({"gather_global.forward", "all_to_all", "domain", 1, 8 * (p - 1)});
      want.push_back({"gather_global.forward", "all_to_all_v", "domain", 2, 8 * asked + served * 2 * 8});
      want.push_back({"gather_global.backward", "all_to_all_v", "domain", 1, asked * 2 * 8});
      check_ledger(line, want);
    }
}

TEST_CASE("patch point cloud: unsupported placements are MissingShardPatch", "[point_cloud]") {
  const Mesh& line = line_mesh();
  const ShardTensor coords = distribute(cloud(6, 105), line, on_line(Placement::Shard(1)));
  const ShardTensor q = distribute(cloud(5, 106), line, on_line(Placement::Replicate()));
  CHECK_THROWS_WITH(knn(coords, q, 2), Catch::Contains("knn") && Catch::Contains("S(1)"));
  CHECK_THROWS_AS(radius_search(q, coords, 0.5, 2), MissingShardPatch);
  const ShardTensor partial = sum(distribute(rnd({2, 6, 3}, 107), line, on_line(Placement::Shard(1))), {1});
  CHECK_THROWS_AS(knn(partial, q, 2), MissingShardPatch);
}

TEST_CASE("patch knn / radius_search: CUDA points or queries are a DeviceError, not a copy to the host",
          "[point_cloud][cuda]") {
  if (skip_without_cuda()) return;
  const Mesh& line = line_mesh();
  const Tensor host = rnd({9, 3}, 91);
  const Tensor dev = host.to(Device::cuda(0));
  const ShardTensor on_host = distribute(host, line, {Placement::Replicate()});
  const ShardTensor on_device = distribute(dev, line, {Placement::Replicate()});
  CHECK_THROWS_AS(knn(on_device, on_host, 2), DeviceError);
  CHECK_THROWS_AS(knn(on_host, on_device, 2), DeviceError);
  CHECK_THROWS_AS(radius_search(on_device, on_device, 0.5, 2), DeviceError);
}

// ---- configurations the contract accepts, each with its exact collectives (issue 9) ----------------------------

TEST_CASE("patch radius_search on the 2x2 mesh: the ring on dx, queries over dy; features gathered", "[point_cloud]") {
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  const int cx = grid.axis("dx").rank(), cy = grid.axis("dy").rank();
  const Tensor points = cloud(13, 105), queries = cloud(9, 106);
  const double radius = 0.9;
  const Brute want = brute_force(points, queries, 4, radius);
  for (const Extents& ext : {split_extents(13, 2), Extents{0, 13}, Extents{13, 0}}) {
    INFO("points over dx " << ext[0] << "|" << ext[1]);
    const Placements pts_on = {S(0), R}, q_on = {R, S(0)};
    const ShardTensor gp = distribute(points, grid, pts_on, {{ext, {}}});
    const ShardTensor gq = distribute(queries, grid, q_on);
    grid.flat().ledger().reset();
    const Neighbors nb = radius_search(gp, gq, radius, 4);
    check_ledger(grid, {{"radius_search.forward", "ring_shift", "dx", 1, ring_bytes(ext, cx, 3)}});
    CHECK(nb.index.placements() == q_on);
    check_same(nb, want);
    // Features placed like the points, gathered at the neighbours (placed like the queries); the parity needs
    // the features really split, so not with one dx rank holding every point.
    if (ext[0] == 0 || ext[1] == 0) continue;
    // The rows this dy coordinate's queries need travel on dx (both dx ranks ask for the same rows). The index
    // is replicated along dx, so each owner keeps its own copy of the grad: no backward all_to_all_v; the
    // features' grad is all-reduced over dy, where they are replicated and the queries sharded.
    auto fn = [&](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      const ShardTensor& f = in[0];
      const ShardTensor pts = distribute(points, f.mesh(), f.placements(), f.spec().all_extents());
      const ShardTensor qs = distribute(queries, f.mesh(), q_on);
      return std::vector<ShardTensor>{gather_neighbor_features(f, radius_search(pts, qs, radius, 4).index)};
    };
    const Extents q_ext = split_extents(9, 2);
    int64_t first = 0;
    for (int j = 0; j < cy; ++j) first += q_ext[j];
    int64_t asked = 0, served = 0;  // rows other than the owner's, of this dy coordinate's (identical) requests
    for (int64_t i = first * 4; i < (first + q_ext[cy]) * 4; ++i) {
      const int64_t g = want.index[i];
      if (g < 0) continue;
      const int owner_of = g < ext[0] ? 0 : 1;
      if (owner_of != cx) ++asked;
      else ++served;  // the other dx rank asks this rank for it
    }
    ShardedCase c = sharded_case("radius features 2x2", {rnd({13, 2}, 107)}, {pts_on}, {{ext, {}}});
    check_patch(grid, fn, c,
                {{"radius_search.forward", "ring_shift", "dx", 1, ring_bytes(ext, cx, 3)},
                 {"gather_global.forward", "agree", "dx", 1, 1},
                 {"gather_global.forward", "all_to_all", "dx", 1, 8},
                 {"gather_global.forward", "all_to_all_v", "dx", 2, 8 * asked + served * 2 * 8},
                 {"gather_global.backward", "all_reduce", "dy", 1, all_reduce_bytes(ext[cx] * 2, 8, 2)}});
  }
}
