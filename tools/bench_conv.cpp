// shardrt-bench-conv: a halo conv2d (3x3, padding 1, C -> C channels, f32, batch 1) on an H x W image sharded over
// H, forward + backward, side by side with the same conv run serially (the plain local op on the whole image, no
// ShardTensor, no communication). Run under mpiexec -n P; rank 0 prints markdown rows (--header prints the table
// header first; with P = 1 the serial row is printed too).
//
// Columns: time per forward+backward (slowest rank, best of --reps after a warm-up); halo bytes this rank sent
// (ledger, forward + backward, max over ranks) next to the minimum (every interior boundary carries exactly its
// halo rows each way: 2 * h * C * W * 4 bytes per neighbour per pass); the weight-grad all-reduce bytes; peak
// allocator bytes per rank during one forward+backward (reset before; inputs, weights and the output grad
// allocated before the reset are not counted), max over ranks. For P > 1 a blocking reference runs next to it:
// the same sharded conv built from the same pieces without overlap (blocking halo exchange into a padded copy,
// then one local conv on it, same weight-grad all-reduce).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "mesh/mesh.h"
#include "patches/ops.h"
#include "patches/patch_util.h"
#include "patches/window.h"
#include "runtime/allocator.h"
#include "runtime/factories.h"
#include "tools/bench_util.h"
#include "tools/mpi_session.h"

using namespace shardrt;

namespace {

struct Args {
  std::vector<int64_t> sizes = {64, 128, 256, 512, 1024};
  int64_t channels = 32;
  int reps = 8;
  bool header = false;
};

void add_options(CLI::App& app, Args& a) {
  app.add_option("--sizes", a.sizes, "image sizes H = W, comma-separated")->delimiter(',')->capture_default_str();
  app.add_option("--channels", a.channels, "input and output channels C")->capture_default_str();
  app.add_option("--reps", a.reps, "timed runs per row (the best is reported)")->capture_default_str();
  app.add_flag("--header", a.header, "print the table header first");
}

struct Measure {
  double seconds = 0;
  int64_t peak = 0;
};

// Best time of `reps` runs of `step` (after one warm-up), the slowest rank's; peak bytes of the last run.
template <typename F>
Measure measure(int reps, F step) {
  step();
  Measure m;
  m.seconds = 1e30;
  for (int i = 0; i < reps; ++i) {
    reset_peak_memory(Device::cpu());
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    m.seconds = std::min(m.seconds, bench::slowest_rank_seconds(step));
    m.peak = bench::max_over_ranks(memory_stats(Device::cpu()).peak_bytes - before);
  }
  return m;
}

std::string mib_cell(int64_t b) { return bench::two_decimals(bench::mib(b)); }

}  // namespace

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  CLI::App app{"Halo conv2d sharded over H next to the serial op and a blocking padded-copy reference."};
  Args args;
  add_options(app, args);
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  const int rank = session.rank(), p = session.size();
  Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain", tools::bench_comm_options(tools::BenchGpu::none));
  const int64_t C = args.channels, h = 1;
  if (rank == 0 && args.header) {
    std::printf("| H x W | run | fwd+bwd (ms) | halo bytes sent / rank (KiB) | minimum (KiB) | weight-grad all-reduce "
                "(KiB) | peak / rank (MiB) | blocking padded-copy reference: fwd+bwd (ms) | its peak / rank (MiB) |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (int64_t n : args.sizes) {
    Generator gen(7);
    Tensor w = mul_scalar(randn({C, C, 3, 3}, {DType::f32}, &gen), 0.05);
    Tensor b = randn({C}, {DType::f32}, &gen);
    set_requires_grad(w);
    set_requires_grad(b);
    if (p == 1) {
      // Serial reference: the local op on the whole image.
      Tensor x = randn({1, C, n, n}, {DType::f32}, &gen);
      set_requires_grad(x);
      Tensor g = randn({1, C, n, n}, {DType::f32}, &gen);
      const Measure m = measure(args.reps, [&] { backward(conv(x, w, b, {1}, {1}, {1}), g); });
      if (rank == 0)
        std::printf("| %lld x %lld | serial | %.2f | 0 | 0 | 0 | %s | | |\n", static_cast<long long>(n),
                    static_cast<long long>(n), m.seconds * 1e3, mib_cell(m.peak).c_str());
    }
    const Extents ext = split_extents(n, p);
    Tensor xl = randn({1, C, ext[rank], n}, {DType::f32}, &gen);
    set_requires_grad(xl);
    const ShardTensor xs = from_local(xl, mesh, {Placement::Shard(2)}, AxisExtents{ext});
    Tensor g = randn({1, C, ext[rank], n}, {DType::f32}, &gen);
    mesh.flat().ledger().reset();
    const Measure m = measure(args.reps, [&] { backward(conv(xs, w, b, {1}, {1}, {1}).local(), g); });
    const int64_t runs = args.reps + 1;
    int64_t halo = 0, reduce = 0;
    for (const LedgerEntry& e : mesh.flat().ledger().entries()) {
      if (e.kind == "halo_exchange") halo += e.bytes_sent;
      if (e.kind == "all_reduce") reduce += e.bytes_sent;
    }
    halo = bench::max_over_ranks(halo / runs);
    reduce = bench::max_over_ranks(reduce / runs);
    std::string ref_ms, ref_peak;
    if (p > 1) {
      const HaloWidths widths{std::vector<int64_t>(p, h), std::vector<int64_t>(p, h)};  // padding 1 = h at the edges
      const Measure r = measure(args.reps, [&] {
        const std::vector<Tensor> wb = patch::reduce_grads_over("conv_ref", mesh, {0}, {w, b});
        const Tensor padded = patch::halo_pad("conv_ref", xl, mesh, 0, 2, widths, 0.0, false).padded;
        backward(conv(padded, wb[0], wb[1], {1}, {0, 1}, {1}), g);
      });
      ref_ms = bench::two_decimals(r.seconds * 1e3);
      ref_peak = mib_cell(r.peak);
    }
    const int64_t neighbours = p == 1 ? 0 : p == 2 ? 1 : 2;
    const int64_t minimum = 2 * neighbours * h * C * n * 4;
    if (rank == 0)
      std::printf("| %lld x %lld | P = %d | %.2f | %.1f | %.1f | %.1f | %s | %s | %s |\n", static_cast<long long>(n),
                  static_cast<long long>(n), p, m.seconds * 1e3, halo / 1024.0, minimum / 1024.0, reduce / 1024.0,
                  mib_cell(m.peak).c_str(), ref_ms.c_str(), ref_peak.c_str());
  }
  return 0;
}
