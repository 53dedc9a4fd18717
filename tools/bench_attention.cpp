// shardrt-bench-attention: sharded attention over MPI (run under mpiexec -n P by tools/bench-attention).
//   serial     — the local op on the whole sequence, one process (printed by the P = 1 run only);
//   ring       — q, k, v sharded on the sequence, K/V blocks travelling the ring (O(N/P) memory per rank);
//   all-gather — the same placements, K/V all-gathered for one local attention (O(N) K/V per rank in the op).
// Forward + backward (random grad for out and lse), f32, B*H = 2, D = Dv = 64. Per row: best wall time (max over
// ranks), bytes this rank sent per the comm ledger (max over ranks) next to the minimum an O(N/P)-memory
// algorithm must move (below), and the allocator's peak bytes per rank (max over ranks; reset right before one
// forward+backward, so it holds the local inputs, their grads and the op's own buffers).
//
// Minimum bytes per rank: each rank must receive the other ranks' K/V once in forward, (P-1)/P · KV(N) with
// KV(n) = BH·n·(D+Dv)·4; backward needs them again (keeping them would be O(N) memory) and must return each
// rank's partial dK/dV to the owners, a reduce-scatter of another (P-1)/P · KV(N): 3·(P-1)/P · KV(N) in all.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "mesh/mesh.h"
#include "patches/ops.h"
#include "patches/placement.h"
#include "runtime/allocator.h"
#include "runtime/factories.h"
#include "tools/bench_util.h"
#include "tools/mpi_session.h"

using namespace shardrt;

namespace {

constexpr int64_t kBH = 2, kD = 64;

struct Measure {
  double ms = 0;
  int64_t bytes = 0, peak = 0, peak_above = 0;
};

// Best-of-`reps` time (after one warm-up), then one more run for the ledger and the allocator's peak.
Measure measure(const std::function<void()>& step, CommLedger& ledger, int reps) {
  Measure m;
  step();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) best = std::min(best, bench::slowest_rank_seconds(step));
  m.ms = best * 1e3;
  MPI_Barrier(MPI_COMM_WORLD);
  ledger.reset();
  const MemoryStats before = memory_stats(Device::cpu());
  reset_peak_memory(Device::cpu());
  step();
  const MemoryStats after = memory_stats(Device::cpu());
  m.bytes = static_cast<int64_t>(bench::max_over_ranks(static_cast<double>(ledger.total_bytes())));
  m.peak = static_cast<int64_t>(bench::max_over_ranks(static_cast<double>(after.peak_bytes)));
  m.peak_above =
      static_cast<int64_t>(bench::max_over_ranks(static_cast<double>(after.peak_bytes - before.current_bytes)));
  return m;
}

void row(int64_t n, int p, const char* mode, const Measure& m, int64_t min_bytes, int rank) {
  if (rank != 0) return;
  std::printf("| %ld | %d | %s | %.1f | %.2f | %.2f | %.2f | %.2f |\n", static_cast<long>(n), p, mode, m.ms,
              bench::mib(m.bytes), bench::mib(min_bytes), bench::mib(m.peak), bench::mib(m.peak_above));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  CLI::App app{"Sharded attention (ring, all-gather KV) next to the serial op, forward + backward."};
  std::vector<int64_t> sizes = {512, 1024, 2048, 4096};
  bool header = false;
  app.add_option("sizes", sizes, "sequence lengths N")->capture_default_str();
  app.add_flag("--header", header, "print the table header first");
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  const int rank = session.rank(), p = session.size();
  const CommOptions opts = tools::bench_comm_options(tools::BenchGpu::bind_by_local_rank);
  const Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain", opts);
  CommLedger& ledger = *opts.ledger;
  if (header && rank == 0) {
    std::printf("| N (= Nq = Nk) | P | mode | fwd+bwd ms | MiB sent / rank | minimum MiB / rank | "
                "peak MiB / rank | peak above inputs MiB |\n");
    std::printf("|---:|---:|---|---:|---:|---:|---:|---:|\n");
  }
  const double scale = 0.125;  // 1/sqrt(64)
  for (int64_t n : sizes) {
    const int reps = n >= 2048 ? 2 : 3;
    const Extents ext = split_extents(n, p);
    int64_t off = 0;
    for (int r = 0; r < mesh.rank(); ++r) off += ext[r];
    const int64_t mine = ext[mesh.rank()];
    const int64_t min_bytes = 3 * (p - 1) * kBH * n * (2 * kD) * 4 / p;
    // This rank's slices only: the whole sequence is generated once, sliced, and dropped.
    Tensor q, k, v, gout, glse;
    {
      Generator gen(7);
      const Tensor fq = randn({1, kBH, n, kD}, {DType::f32}, &gen);
      const Tensor fk = randn({1, kBH, n, kD}, {DType::f32}, &gen);
      const Tensor fv = randn({1, kBH, n, kD}, {DType::f32}, &gen);
      const Tensor fg = randn({1, kBH, n, kD}, {DType::f32}, &gen);
      const Tensor fl = randn({1, kBH, n}, {DType::f32}, &gen);
      q = fq.narrow(2, off, mine).contiguous();
      k = fk.narrow(2, off, mine).contiguous();
      v = fv.narrow(2, off, mine).contiguous();
      gout = fg.narrow(2, off, mine).contiguous();
      glse = fl.narrow(2, off, mine).contiguous();
      if (p == 1) {
        Tensor sq = fq.contiguous(), sk = fk.contiguous(), sv = fv.contiguous();
        set_requires_grad(sq);
        set_requires_grad(sk);
        set_requires_grad(sv);
        const Measure m = measure(
            [&] {
              const AttentionOutput o = scaled_dot_product_attention(sq, sk, sv, scale);
              backward({o.out, o.lse}, {fg, fl});
            },
            ledger, reps);
        row(n, 1, "serial (local op)", m, 0, rank);
      }
    }
    set_requires_grad(q);
    set_requires_grad(k);
    set_requires_grad(v);
    const Placements seq = {Placement::Shard(2)};
    const AxisExtents extents = {ext};
    for (KvStrategy s : {KvStrategy::ring, KvStrategy::all_gather}) {
      const Measure m = measure(
          [&] {
            const AttentionShardOutput o =
                scaled_dot_product_attention(from_local(q, mesh, seq, extents), from_local(k, mesh, seq, extents),
                                             from_local(v, mesh, seq, extents), scale, s);
            backward({o.out.local(), o.lse.local()}, {gout, glse});
          },
          ledger, reps);
      row(n, p, s == KvStrategy::ring ? "ring" : "all-gather KV", m, min_bytes, rank);
    }
  }
  return 0;
}
