// CUDA streams and error checks for code compiled with CUDA (runtime/cuda, kernels/cuda).
#pragma once
#include <cuda_runtime_api.h>

#include "runtime/errors.h"

namespace shardrt {

// The stream on which ShardRT queues all work for a device (one non-blocking stream per device, created on
// first use). Makes `device` current as a side effect.
cudaStream_t current_stream(int device);

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace shardrt

#define SHARDRT_CUDA_CHECK(expr)                                                      \
  do {                                                                                \
    cudaError_t shardrt_err_ = (expr);                                                \
    if (shardrt_err_ != cudaSuccess) ::shardrt::throw_cuda_error(shardrt_err_, #expr, __FILE__, __LINE__); \
  } while (0)
