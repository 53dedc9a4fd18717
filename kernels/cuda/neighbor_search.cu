#include "kernels/cuda/neighbor_search.h"

#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rounding.cuh"
#include "runtime/cuda/stream.h"

namespace shardrt::kernels::cuda {
namespace {

// Points of one shared-memory tile: kTileDoubles / d of them (d <= kTileDoubles; larger d reads global memory).
constexpr int kSearchThreads = 128;
constexpr int kTileDoubles = 2048;  // 16 KiB

// Squared distance summed in dim order, each step rounded on its own: kernels/cpu/neighbor_search.cpp's dist2.
__device__ inline double dist2(const double* a, const double* b, int64_t d) {
  double s = 0;
  for (int64_t c = 0; c < d; ++c) {
    const double diff = a[c] - b[c];
    s = add_rn(s, mul_rn(diff, diff));
  }
  return s;
}

__device__ inline bool below(double d2a, int64_t ia, double d2b, int64_t ib) {
  return d2a < d2b || (d2a == d2b && ia < ib);
}

// Inserts (d2, index) into the sorted row when it belongs among the k best within the radius.
__device__ inline void offer(double* row_d2, int64_t* row_index, int64_t& count, int64_t k, double radius2, double d2,
                             int64_t index) {
  if (!(d2 <= radius2)) return;
  if (count == k && !below(d2, index, row_d2[k - 1], row_index[k - 1])) return;
  int64_t at = count < k ? count : k - 1;  // the slot that frees up: the end, or the dropped last entry
  while (at > 0 && below(d2, index, row_d2[at - 1], row_index[at - 1])) {
    row_d2[at] = row_d2[at - 1];
    row_index[at] = row_index[at - 1];
    --at;
  }
  row_d2[at] = d2;
  row_index[at] = index;
  if (count < k) ++count;
}

__global__ void merge_block_kernel(int64_t nq, const double* q, const double* pts, int64_t n, int64_t d,
                                   int64_t offset, int64_t k, double radius2, double* best_d2, int64_t* best_index,
                                   int64_t* count) {
  __shared__ double tile[kTileDoubles];
  // Every thread of the block walks every tile (the loads are shared), whether or not it holds a query.
  const bool staged = d > 0 && d <= kTileDoubles;
  const int64_t tile_points = staged ? kTileDoubles / d : n;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const bool active = i < nq;
  double* row_d2 = active ? best_d2 + i * k : nullptr;
  int64_t* row_index = active ? best_index + i * k : nullptr;
  int64_t c = active ? count[i] : 0;
  const double* qi = active ? q + i * d : nullptr;
  for (int64_t start = 0; start < n; start += tile_points) {
    const int64_t in_tile = n - start < tile_points ? n - start : tile_points;
    const double* block = pts + start * d;
    if (staged) {
      __syncthreads();  // the previous tile is no longer read
      for (int64_t e = threadIdx.x; e < in_tile * d; e += blockDim.x) tile[e] = block[e];
      __syncthreads();
      block = tile;
    }
    if (active) {
      for (int64_t j = 0; j < in_tile; ++j) {
        offer(row_d2, row_index, c, k, radius2, dist2(qi, block + j * d, d), offset + start + j);
      }
    }
  }
  if (active) count[i] = c;
}

}  // namespace

void merge_block_brute(int64_t nq, const double* q, const double* pts, int64_t n, int64_t d, int64_t offset,
                       int64_t k, double radius2, double* best_d2, int64_t* best_index, int64_t* count,
                       cudaStream_t stream) {
  if (nq == 0 || n == 0) return;
  const auto blocks = static_cast<unsigned>((nq + kSearchThreads - 1) / kSearchThreads);
  merge_block_kernel<<<blocks, kSearchThreads, 0, stream>>>(nq, q, pts, n, d, offset, k, radius2, best_d2,
                                                           best_index, count);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace shardrt::kernels::cuda
