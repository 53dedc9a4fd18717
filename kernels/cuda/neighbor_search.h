// Nearest-neighbour search of one block of points for a set of queries on a CUDA device, merged into each query's
// running best list: the device twin of kernels/cpu/neighbor_search.h's merge_block_brute, for knn and
// radius_search on device tensors (patches/point_cloud.cpp calls it once per ring block).
// Contract: kernels/cpu/neighbor_search.h (f64 coordinates, squared distances summed in dim order in f64, a
// candidate enters when d2 <= radius2 and (d2, global index) is below the list's last entry or the list holds
// fewer than k). CUDA: every product and sum is rounded on its own (no fused multiply-add), so the distances, and
// hence the lists and their tie order, equal the CPU's bit for bit. Brute force, one thread per query, the block's
// points staged through shared memory in tiles; the lists live in device memory:
//   best_d2 (nq x k), best_index (nq x k), count (nq): entries [0, count[i]) of row i are valid, sorted ascending by
//   (d2, index). Start them with count = 0 (the other entries are then never read).
// q (nq x d) and pts (n x d) are row-major device arrays; global point indices run offset .. offset + n - 1;
// k >= 1; radius2 >= 0 (+inf for knn). Queued on `stream`, never synchronises.
#pragma once
#include <cstdint>

#include "runtime/cuda_context.h"

namespace shardrt::kernels::cuda {

void merge_block_brute(int64_t nq, const double* q, const double* pts, int64_t n, int64_t d, int64_t offset,
                       int64_t k, double radius2, double* best_d2, int64_t* best_index, int64_t* count,
                       CudaStream stream);

}  // namespace shardrt::kernels::cuda
