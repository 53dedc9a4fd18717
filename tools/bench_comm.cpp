// shardrt-bench-comm: latency and bandwidth of ShardRT's MPI collectives, side by side with the same operation
// as a plain blocking MPI call (the reference: what the transport gives without ShardRT's deadline polling,
// validation and ledger). Run under mpiexec; rank 0 prints a markdown table.
//
// Each collective also runs on a second communicator in checked mode (CommOptions::check_collectives: the ranks
// all-gather the call's signature first, see mesh/signature.h), interleaved batch by batch with the unchecked
// one, so the "check cost" column is the difference within one run. SHARDRT_COMM_CHECK is ignored here: it
// would override both communicators' settings.
//
// Sizes (S, from --min-bytes to --max-bytes, x4 steps) are per collective, as nccl-tests counts them:
//   all_reduce        the buffer (S bytes, f32)
//   all_gather_v      the gathered output (S); rank j contributes a share proportional to j + 1
//   reduce_scatter_v  the input (S); rank j keeps a share proportional to j + 1
//   all_to_all_v      each rank's send buffer (S); the share for rank j is proportional to j + 1
//   ring_shift        each rank's message (S)
// Latency is the time per call of the slowest rank, best of three batches after a warm-up. Bus bandwidth is S / latency
// scaled by the fraction of the data that crosses between ranks: 2(P-1)/P for all_reduce, (P-1)/P for the gathers,
// scatters and all-to-all, 1 for the ring shift; it is comparable across collectives and rank counts.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "mesh/mesh.h"
#include "runtime/factories.h"
#include "tools/bench_util.h"
#include "tools/mpi_session.h"

using namespace shardrt;

namespace {

struct Args {
  int64_t min_bytes = 1024;
  int64_t max_bytes = 64ll << 20;
  double seconds = 0.15;  // target time per measurement
};

void add_options(CLI::App& app, Args& a) {
  app.add_option("--min-bytes", a.min_bytes, "smallest size per collective, in bytes")->capture_default_str();
  app.add_option("--max-bytes", a.max_bytes, "largest size per collective, in bytes (sizes step x4)")
      ->capture_default_str();
  app.add_option("--seconds", a.seconds, "target time per measurement")->capture_default_str();
}

// Element counts per rank proportional to rank + 1, summing to `total`.
std::vector<int64_t> shares(int64_t total, int p) {
  std::vector<int64_t> c(p);
  int64_t weight = static_cast<int64_t>(p) * (p + 1) / 2, used = 0;
  for (int j = 0; j < p; ++j) used += c[j] = total * (j + 1) / weight;
  c[p - 1] += total - used;
  return c;
}

std::vector<int> to_int(const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); }
std::vector<int> displs(const std::vector<int64_t>& v) {
  std::vector<int> d(v.size(), 0);
  for (std::size_t j = 1; j < v.size(); ++j) d[j] = d[j - 1] + static_cast<int>(v[j - 1]);
  return d;
}

// Seconds per call of each of `fns`: the best of three timed batches (the machine may be shared, and the best
// batch is the least disturbed one), each batch's time being the slowest rank's. The batches of the functions
// alternate, so a disturbance hits them alike and their differences stay meaningful. Each batch size comes from
// a timed warm-up, agreed on by every rank so that all run the same number of calls.
std::vector<double> times_per_call(const std::vector<std::function<void()>>& fns, double target) {
  std::vector<int> iters;
  for (const auto& fn : fns) {
    const double once = bench::slowest_rank_seconds(fn);
    iters.push_back(static_cast<int>(std::clamp(target / 3 / std::max(once, 1e-7), 2.0, 1000.0)));
  }
  std::vector<double> best(fns.size(), 1e30);
  for (int batch = 0; batch < 3; ++batch)
    for (std::size_t f = 0; f < fns.size(); ++f) {
      const double t = bench::slowest_rank_seconds([&] {
        for (int i = 0; i < iters[f]; ++i) fns[f]();
      });
      best[f] = std::min(best[f], t / iters[f]);
    }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  CLI::App app{"Latency and bus bandwidth of ShardRT's MPI collectives next to plain blocking MPI calls."};
  Args args;
  add_options(app, args);
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  const int rank = session.rank(), p = session.size();
  if (args.min_bytes < 4 || args.min_bytes > args.max_bytes) {  // every rank sees the same arguments
    if (rank == 0)
      std::fprintf(stderr, "shardrt-bench-comm: --min-bytes %lld and --max-bytes %lld make no sizes; give 4 <= "
                   "--min-bytes <= --max-bytes\n", static_cast<long long>(args.min_bytes),
                   static_cast<long long>(args.max_bytes));
    return 1;
  }
  unsetenv("SHARDRT_COMM_CHECK");  // the options below decide which communicator is checked
  Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain", tools::bench_comm_options(tools::BenchGpu::none));
  const Communicator& c = mesh.axis("domain");
  CommOptions checked_opts = tools::bench_comm_options(tools::BenchGpu::none);
  checked_opts.check_collectives = true;
  const Communicator checked(MPI_COMM_WORLD, "domain", checked_opts);
  MPI_Comm raw = MPI_COMM_WORLD;

  if (rank == 0) {
    std::printf("### %d ranks\n\n", p);
    std::printf(
        "| collective | size | ShardRT latency (us) | ShardRT busbw (GB/s) | checked latency (us) | check cost (us) "
        "| MPI latency (us) | MPI busbw (GB/s) |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  const char* names[] = {"all_reduce", "all_gather_v", "reduce_scatter_v", "all_to_all_v", "ring_shift"};
  const double frac_gather = static_cast<double>(p - 1) / p;
  const double factors[] = {2 * frac_gather, frac_gather, frac_gather, frac_gather, 1.0};
  const int next = (rank + 1) % p, prev = (rank + p - 1) % p;

  for (int k = 0; k < 5; ++k) {
    for (int64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 4) {
      const int64_t n = bytes / 4;
      const auto share = shares(n, p);
      const auto share_i = to_int(share), share_d = displs(share);
      // ours_on(c) issues the collective on communicator c: the unchecked one or the checked one.
      std::function<void(const Communicator&)> ours_on;
      std::function<void()> ref;
      Tensor a, b;
      switch (k) {
        case 0:
          a = zeros({n});
          b = zeros({n});
          ours_on = [&](const Communicator& cc) { cc.all_reduce(a); };
          ref = [&] { MPI_Allreduce(MPI_IN_PLACE, b.raw_data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw); };
          break;
        case 1:
          a = zeros({share[rank]});
          b = zeros({n});
          ours_on = [&](const Communicator& cc) { cc.all_gather_v(a, b, share); };
          ref = [&] {
            MPI_Allgatherv(a.raw_data(), share_i[rank], MPI_FLOAT, b.raw_data(), share_i.data(), share_d.data(),
                           MPI_FLOAT, raw);
          };
          break;
        case 2:
          a = zeros({n});
          b = zeros({share[rank]});
          ours_on = [&](const Communicator& cc) { cc.reduce_scatter_v(a, b, share); };
          ref = [&] { MPI_Reduce_scatter(a.raw_data(), b.raw_data(), share_i.data(), MPI_FLOAT, MPI_SUM, raw); };
          break;
        case 3: {
          a = zeros({n});
          // What rank j sends here is its share for this rank: proportional to rank + 1 of its own total.
          std::vector<int64_t> recv(p, shares(n, p)[rank]);
          b = zeros({recv[0] * p});
          auto recv_i = to_int(recv), recv_d = displs(recv);
          ours_on = [&, recv](const Communicator& cc) { cc.all_to_all_v(a, share, b, recv); };
          ref = [&, recv_i, recv_d] {
            MPI_Alltoallv(a.raw_data(), share_i.data(), share_d.data(), MPI_FLOAT, b.raw_data(), recv_i.data(),
                          recv_d.data(), MPI_FLOAT, raw);
          };
          break;
        }
        default:
          a = zeros({n});
          b = zeros({n});
          ours_on = [&](const Communicator& cc) { cc.ring_shift(a, b); };
          ref = [&] {
            MPI_Sendrecv(a.raw_data(), static_cast<int>(n), MPI_FLOAT, next, 0, b.raw_data(), static_cast<int>(n),
                         MPI_FLOAT, prev, 0, raw, MPI_STATUS_IGNORE);
          };
      }
      const auto t = times_per_call({[&] { ours_on(c); }, [&] { ours_on(checked); }, ref}, args.seconds);
      const double t_ours = t[0], t_checked = t[1], t_ref = t[2];
      if (rank == 0) {
        auto bw = [&](double s) { return static_cast<double>(bytes) / s / 1e9 * factors[k]; };
        std::printf("| %s | %s | %.1f | %.2f | %.1f | %+.1f | %.1f | %.2f |\n", names[k],
                    bench::size_str(bytes).c_str(), t_ours * 1e6, bw(t_ours), t_checked * 1e6,
                    (t_checked - t_ours) * 1e6, t_ref * 1e6, bw(t_ref));
        std::fflush(stdout);
      }
    }
  }
  if (rank == 0) std::printf("\n");
  return 0;
}
