// Runs a piece of a test under a fixed OpenMP thread count, for the tests that compare results across counts.
#pragma once
#include <omp.h>

namespace shardrt::test {

// Runs fn with OpenMP limited to `threads`, restoring the previous limit.
template <typename Fn>
void with_threads(int threads, Fn&& fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  fn();
  omp_set_num_threads(saved);
}

}  // namespace shardrt::test
