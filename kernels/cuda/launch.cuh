#pragma once
// Launch shapes and grid indexing shared by the CUDA kernels (elementwise, reduce, softmax, norm). Internal to
// kernels/cuda.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace shardrt::kernels::cuda {

// Threads of a block for flat, grid-stride kernels.
constexpr int kThreads = 256;
// Enough blocks to fill any current GPU; more work loops over the grid.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

// A namespace-scope constant, so device code may use it without calling a host-only constexpr function.
template <typename T>
constexpr T kNegInf = -std::numeric_limits<T>::infinity();

// Blocks for `work` items at `per_block` items per block, capped at kMaxBlocks.
inline unsigned blocks_for(int64_t work, int64_t per_block) {
  return static_cast<unsigned>(std::min<int64_t>((work + per_block - 1) / per_block, kMaxBlocks));
}

// Threads of the block that handles one row of length n: a multiple of the warp size, up to 512 (enough loads in
// flight per row), and no more than the row needs. Depends on n only, which keeps results reproducible.
inline int row_threads(int64_t n) { return static_cast<int>(std::clamp<int64_t>((n + 31) / 32 * 32, 32, 512)); }

__device__ inline int64_t first_index() { return blockIdx.x * int64_t{blockDim.x} + threadIdx.x; }
__device__ inline int64_t grid_stride() { return int64_t{blockDim.x} * gridDim.x; }

__device__ inline float exp_of(float v) { return expf(v); }
__device__ inline double exp_of(double v) { return ::exp(v); }

}  // namespace shardrt::kernels::cuda
