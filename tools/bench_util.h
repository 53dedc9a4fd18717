// Timing shared by the MPI benchmarks: every figure is the slowest rank's, since that is what a step costs.
#pragma once
#include <mpi.h>

#include <chrono>
#include <cstdint>

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

}  // namespace shardrt::bench
