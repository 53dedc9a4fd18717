// Timing and number formatting shared by the MPI benchmarks. Every time is the slowest rank's, since that is
// what a step costs.
#pragma once
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace shardrt::bench {

inline double max_over_ranks(double x) {
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return x;
}
inline int64_t max_over_ranks(int64_t v) {
  long long x = v;
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return x;
}

// Seconds one call of `fn` takes on the slowest rank; the ranks start together behind a barrier.
template <typename F>
double slowest_rank_seconds(F&& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return max_over_ranks(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// A byte count as the tables label sizes: whole MiB from 1 MiB up, else whole KiB.
inline std::string size_str(int64_t bytes) {
  char s[32];
  if (bytes >= (1 << 20)) std::snprintf(s, sizeof s, "%lld MiB", static_cast<long long>(bytes >> 20));
  else std::snprintf(s, sizeof s, "%lld KiB", static_cast<long long>(bytes >> 10));
  return s;
}

inline double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// `x` with two decimals, for table cells that may also be left empty.
inline std::string two_decimals(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f", x);
  return s;
}

}  // namespace shardrt::bench
