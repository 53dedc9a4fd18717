// shardrt-bench-knn: knn (k nearest) and radius_search (ball query) with points and queries sharded Shard(0) over
// P ranks (mpiexec -n P), uniformly random 3-D points in the unit cube (f64), the KD-tree block search next to the
// brute-force reference (patches/ops.h NeighborSearch). Rank 0 prints markdown rows (--header prints the table
// header first).
//
// Layouts: "random" (the points in generation order: every ring block spans the whole cube, so no block can be
// skipped by its bounding box) and "sorted" (sorted by x before sharding, as a slab domain decomposition: a
// block far from a rank's queries is skipped). The brute force is O(Nq * Np), so it runs on the first
// --brute-queries queries only (spread over the ranks like the full set) and its time is reported for those, with
// the time per query next to the KD-tree's; the two are checked equal on those queries (indices and distances).
// Columns: time of one call (slowest rank, best of --reps after a warm-up), queries per second (all ranks), ring
// bytes sent per rank (ledger).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "mesh/mesh.h"
#include "patches/ops.h"
#include "runtime/factories.h"
#include "tools/bench_util.h"
#include "tools/mpi_session.h"

using namespace shardrt;

namespace {

struct Args {
  int64_t points = 1000000, queries = 1000000, brute_queries = 2000, k = 16, max_points = 32;
  double radius = 0.0156;  // about 16 points of 1e6 inside on average
  std::vector<std::string> layouts = {"random", "sorted"};
  int reps = 1;
  bool header = false;
};

void add_options(CLI::App& app, Args& a) {
  app.add_option("--points", a.points, "points Np (uniform in the unit cube)")->capture_default_str();
  app.add_option("--queries", a.queries, "queries Nq for the KD-tree rows")->capture_default_str();
  app.add_option("--brute-queries", a.brute_queries, "queries for the brute-force rows (0: none)")
      ->capture_default_str();
  app.add_option("--k", a.k, "neighbours of knn")->capture_default_str();
  app.add_option("--radius", a.radius, "radius of radius_search")->capture_default_str();
  app.add_option("--max-points", a.max_points, "max neighbours of radius_search")->capture_default_str();
  app.add_option("--layouts", a.layouts, "random and/or sorted (by x before sharding)")->delimiter(',');
  app.add_option("--reps", a.reps, "timed runs per row (the best is reported)")->capture_default_str();
  app.add_flag("--header", a.header, "print the table header first");
}

// n uniform points in [0, 1)^3, the same on every rank; sorted by x when asked.
Tensor uniform_points(int64_t n, uint64_t seed, bool sorted) {
  Generator gen(seed);
  Tensor t = rand({n, 3}, {DType::f64}, &gen);
  if (!sorted) return t;
  const double* p = t.data<double>();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [p](int64_t a, int64_t b) { return p[3 * a] < p[3 * b]; });
  Tensor s = Tensor::empty({n, 3}, DType::f64, Device::cpu());
  double* q = s.data<double>();
  for (int64_t i = 0; i < n; ++i) std::copy(p + 3 * order[i], p + 3 * order[i] + 3, q + 3 * i);
  return s;
}

ShardTensor shard_rows(const Tensor& full, const Mesh& mesh, int rank, int p) {
  const Extents ext = split_extents(full.size(0), p);
  int64_t off = 0;
  for (int j = 0; j < rank; ++j) off += ext[j];
  return from_local(full.narrow(0, off, ext[rank]).contiguous(), mesh, {Placement::Shard(0)}, AxisExtents{ext});
}

int64_t ring_bytes(const Mesh& mesh) {
  int64_t b = 0;
  for (const LedgerEntry& e : mesh.flat().ledger().entries())
    if (e.kind == "ring_shift") b += e.bytes_sent;
  return b;
}

bool same(const Neighbors& a, const Neighbors& b) {
  const std::vector<double> ai = a.index.local().to_vector(), bi = b.index.local().to_vector();
  const std::vector<double> ad = a.distance.local().to_vector(), bd = b.distance.local().to_vector();
  int ok = ai == bi && ad.size() == bd.size();
  for (size_t i = 0; ok && i < ad.size(); ++i) ok = ad[i] == bd[i] || (ad[i] > 1e300 && bd[i] > 1e300);
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return ok == 1;
}

}  // namespace

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  CLI::App app{"knn / radius_search over sharded points: KD-tree block search next to the brute force."};
  Args args;
  add_options(app, args);
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  const int rank = session.rank(), p = session.size();
  Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain", tools::bench_comm_options(tools::BenchGpu::none));
  if (rank == 0 && args.header) {
    std::printf("| P | layout | op | search | points | queries | time (s) | queries / s | ring bytes sent / rank "
                "(MiB) | equal to brute force |\n");
    std::printf("|---:|---|---|---|---:|---:|---:|---:|---:|---|\n");
  }
  for (const std::string& layout : args.layouts) {
    const Tensor points = uniform_points(args.points, 1, layout == "sorted");
    const Tensor queries = uniform_points(args.queries, 2, layout == "sorted");
    const ShardTensor pts = shard_rows(points, mesh, rank, p);
    const ShardTensor qs = shard_rows(queries, mesh, rank, p);
    const ShardTensor few = shard_rows(queries.narrow(0, 0, std::min(args.brute_queries, args.queries)), mesh, rank, p);
    for (const bool ball : {false, true}) {
      auto run = [&](const ShardTensor& q, NeighborSearch how) {
        return ball ? radius_search(pts, q, args.radius, args.max_points, how) : knn(pts, q, args.k, how);
      };
      const std::string op = ball ? "radius_search r " + bench::two_decimals(args.radius * 1e3) + "e-3 max " +
                                        std::to_string(args.max_points)
                                  : "knn k " + std::to_string(args.k);
      auto row = [&](const char* search, const ShardTensor& q, NeighborSearch how, const std::string& check) {
        double best = 1e30;
        mesh.flat().ledger().reset();
        for (int i = 0; i < args.reps; ++i)
          best = std::min(best, bench::slowest_rank_seconds([&] { (void)run(q, how); }));
        const int64_t bytes = bench::max_over_ranks(ring_bytes(mesh) / args.reps);
        const int64_t nq = q.global_shape()[0];
        if (rank == 0)
          std::printf("| %d | %s | %s | %s | %lld | %lld | %.3f | %.0f | %.2f | %s |\n", p, layout.c_str(), op.c_str(),
                      search, static_cast<long long>(args.points), static_cast<long long>(nq), best, nq / best,
                      bench::mib(bytes), check.c_str());
      };
      row("kd-tree", qs, NeighborSearch::kdtree, "");
      if (args.brute_queries > 0) {
        const bool eq = same(run(few, NeighborSearch::kdtree), run(few, NeighborSearch::brute_force));
        row("brute force", few, NeighborSearch::brute_force, eq ? "yes" : "NO");
      }
    }
  }
  return 0;
}
