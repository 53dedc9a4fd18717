// CUDA error checks for code compiled with CUDA (runtime/cuda, kernels/cuda). current_stream and the CudaStream
// type (which is cudaStream_t) are declared in runtime/cuda_context.h, safe in every build.
#pragma once
#include <cuda_runtime_api.h>

#include "runtime/cuda_context.h"
#include "runtime/errors.h"

namespace shardrt {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace shardrt

#define SHARDRT_CUDA_CHECK(expr)                                                      \
  do {                                                                                \
    cudaError_t shardrt_err_ = (expr);                                                \
    if (shardrt_err_ != cudaSuccess) ::shardrt::throw_cuda_error(shardrt_err_, #expr, __FILE__, __LINE__); \
  } while (0)
