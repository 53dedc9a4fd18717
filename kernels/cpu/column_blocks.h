// Parallel loop over the (outer, n, inner) view shared by the reductions and softmax: one task per outer row
// and block of inner columns. Each output column belongs to exactly one task and is processed serially in n,
// so results do not depend on the thread count.
#pragma once
#include <algorithm>
#include <cstdint>

namespace shardrt::kernels::cpu {

// Calls with fewer elements than this stay on one thread.
constexpr int64_t kColumnParallelMin = int64_t{1} << 15;
// Inner columns one task handles together: per-column accumulators fit on the stack, and each read of
// x[o, k, j0:j1] is contiguous.
constexpr int64_t kInnerBlock = 256;

// Runs task(o, j0, j1) for every outer row o and block [j0, j1) of inner columns.
template <class Task>
void for_each_column_block(int64_t outer, int64_t n, int64_t inner, Task task) {
  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  const int64_t tasks = outer * blocks;
#pragma omp parallel for if (outer * n * inner >= kColumnParallelMin) schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / blocks;
    const int64_t j0 = (t % blocks) * kInnerBlock;
    task(o, j0, std::min(inner, j0 + kInnerBlock));
  }
}

}  // namespace shardrt::kernels::cpu
