// Page-locked host buffers through which CUDA tensors travel over MPI (CUDA builds only). Pinned memory lets
// the device copy run at full DMA speed, and the pool keeps the slow cudaMallocHost off the per-call path.
#pragma once
#include "runtime/tensor.h"

namespace shardrt {

// A contiguous, uninitialised host tensor with t's shape and dtype in pinned memory; the memory goes back to
// the pool when the last tensor on it is destroyed.
Tensor pinned_host_like(const Tensor& t);

}  // namespace shardrt
