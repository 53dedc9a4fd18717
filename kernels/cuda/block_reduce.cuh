#pragma once
// Warp and block reductions shared by the row kernels (reduce, softmax, norm). Internal to kernels/cuda.

#include <cuda_runtime.h>

namespace shardrt::kernels::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline float shuffle_down(float v, int offset) { return __shfl_down_sync(kFullMask, v, offset); }
__device__ inline double shuffle_down(double v, int offset) { return __shfl_down_sync(kFullMask, v, offset); }

template <typename V>
struct Add {
  __device__ V operator()(V a, V b) const { return a + b; }
};

// Reduces v over the block with `combine` and returns the result to every thread. blockDim.x must be a multiple
// of 32 (at most 1024), and every thread of the block must call it. The combining order is fixed by blockDim.x.
// A V other than float or double brings its own shuffle_down, found by argument-dependent lookup.
template <typename V, class Combine>
__device__ V block_allreduce(V v, V identity, Combine combine) {
  __shared__ V partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) v = combine(v, shuffle_down(v, offset));
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : identity;
    for (int offset = 16; offset > 0; offset /= 2) v = combine(v, shuffle_down(v, offset));
    if (lane == 0) partial[0] = v;
  }
  __syncthreads();
  v = partial[0];
  __syncthreads();  // `partial` is reused by the block's next reduction
  return v;
}

}  // namespace shardrt::kernels::cuda
