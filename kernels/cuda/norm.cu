#include "kernels/cuda/norm.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.cuh"
#include "runtime/cuda/stream.h"
#include "runtime/cuda/stream_scratch.h"

namespace shardrt::kernels::cuda {
namespace {

// Parameter-grad row chunks: enough to spread the work over the GPU, few enough that the scratch stays small.
constexpr int64_t kMaxChunks = 256;
constexpr int64_t kMinRowsPerChunk = 32;

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>(rows, kMaxBlocks)); }

// The sum of v over the block, returned to every thread; see block_allreduce for the rules.
__device__ double block_sum(double v) { return block_allreduce(v, 0.0, Add<double>{}); }

// One block per row.
template <typename T>
__global__ void layernorm_kernel(int64_t rows, int64_t D, const T* x, const T* weight, const T* bias, T eps, T* y,
                                 T* mean, T* rstd) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    double acc = 0.0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) acc += static_cast<double>(xr[j]);
    const double mu = block_sum(acc) / static_cast<double>(D);
    acc = 0.0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const double d = static_cast<double>(xr[j]) - mu;
      acc += d * d;
    }
    const double rs = 1.0 / ::sqrt(block_sum(acc) / static_cast<double>(D) + static_cast<double>(eps));
    if (threadIdx.x == 0) {
      mean[r] = static_cast<T>(mu);
      rstd[r] = static_cast<T>(rs);
    }
    // xhat in double: a float mean of data far from zero (x ~ 1e4) is off by half an ulp of 1e4, which would be
    // a large error on the deviations x - mean.
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const double xhat = (static_cast<double>(xr[j]) - mu) * rs;
      yr[j] = static_cast<T>((weight ? xhat * static_cast<double>(weight[j]) : xhat) +
                             (bias ? static_cast<double>(bias[j]) : 0.0));
    }
  }
}

// gx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gy * weight, the grad w.r.t. xhat. One block per row.
template <typename T>
__global__ void layernorm_input_grad_kernel(int64_t rows, int64_t D, const T* x, const T* weight, const T* mean,
                                            const T* rstd, const T* gy, T* gx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * D;
    const T* gyr = gy + r * D;
    T* gxr = gx + r * D;
    const T mu = mean[r];
    const T rs = rstd[r];
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const T g = weight ? gyr[j] * weight[j] : gyr[j];
      sum_g += static_cast<double>(g);
      sum_g_xhat += static_cast<double>(g * ((xr[j] - mu) * rs));
    }
    const T mean_g = static_cast<T>(block_sum(sum_g) / static_cast<double>(D));
    const T mean_g_xhat = static_cast<T>(block_sum(sum_g_xhat) / static_cast<double>(D));
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const T g = weight ? gyr[j] * weight[j] : gyr[j];
      gxr[j] = rs * (g - mean_g - (xr[j] - mu) * rs * mean_g_xhat);
    }
  }
}

// Block (column block, chunk): thread j sums gy * xhat and gy over the chunk's rows for column j, in row order,
// into partial[chunk][0][j] and partial[chunk][1][j].
template <typename T>
__global__ void layernorm_param_partials_kernel(int64_t rows, int64_t D, int64_t rows_per_chunk, const T* x,
                                                const T* mean, const T* rstd, const T* gy, double* partial) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= D) return;
  const int64_t chunk = blockIdx.y;
  const int64_t r_end = (chunk + 1) * rows_per_chunk < rows ? (chunk + 1) * rows_per_chunk : rows;
  double acc_w = 0.0, acc_b = 0.0;
  for (int64_t r = chunk * rows_per_chunk; r < r_end; ++r) {
    const T g = gy[r * D + j];
    acc_w += static_cast<double>(g * ((x[r * D + j] - mean[r]) * rstd[r]));
    acc_b += static_cast<double>(g);
  }
  partial[chunk * 2 * D + j] = acc_w;
  partial[chunk * 2 * D + D + j] = acc_b;
}

// Adds the chunk partials of each column in chunk order onto gweight / gbias (either may be null).
template <typename T>
__global__ void layernorm_param_grads_kernel(int64_t D, int64_t chunks, const double* partial, T* gweight, T* gbias) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < D; j += int64_t{blockDim.x} * gridDim.x) {
    double sum_w = 0.0, sum_b = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      sum_w += partial[c * 2 * D + j];
      sum_b += partial[c * 2 * D + D + j];
    }
    if (gweight) gweight[j] += static_cast<T>(sum_w);
    if (gbias) gbias[j] += static_cast<T>(sum_b);
  }
}

}  // namespace

template <typename T>
void layernorm(int64_t rows, int64_t D, const T* x, const T* weight, const T* bias, T eps, T* y, T* mean, T* rstd,
               cudaStream_t stream) {
  if (rows == 0) return;
  layernorm_kernel<T><<<row_blocks(rows), row_threads(D), 0, stream>>>(rows, D, x, weight, bias, eps, y, mean, rstd);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* weight, const T* mean, const T* rstd,
                        const T* gy, T* gx, T* gweight, T* gbias, cudaStream_t stream) {
  if (rows == 0 || D == 0) return;
  if (gx) {
    layernorm_input_grad_kernel<T><<<row_blocks(rows), row_threads(D), 0, stream>>>(rows, D, x, weight, mean, rstd,
                                                                                     gy, gx);
    SHARDRT_CUDA_CHECK(cudaGetLastError());
  }
  if (!gweight && !gbias) return;
  // Rows are cut into chunks by shape alone, so the summation order, and the result, never changes.
  const int64_t chunks = std::clamp<int64_t>(rows / kMinRowsPerChunk, 1, kMaxChunks);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  StreamScratch partial(static_cast<std::size_t>(chunks * 2 * D) * sizeof(double), stream);
  const dim3 partial_grid(static_cast<unsigned>((D + kThreads - 1) / kThreads), static_cast<unsigned>(chunks));
  layernorm_param_partials_kernel<T><<<partial_grid, kThreads, 0, stream>>>(rows, D, rows_per_chunk, x, mean, rstd,
                                                                             gy, partial.as<double>());
  SHARDRT_CUDA_CHECK(cudaGetLastError());
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((D + kThreads - 1) / kThreads, kMaxBlocks));
  layernorm_param_grads_kernel<T><<<blocks, kThreads, 0, stream>>>(D, chunks, partial.as<double>(), gweight, gbias);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

#define SHARDRT_INSTANTIATE_NORM(T)                                                                               \
  template void layernorm<T>(int64_t, int64_t, const T*, const T*, const T*, T, T*, T*, T*, cudaStream_t);        \
  template void layernorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*, T*,  \
                                      T*, cudaStream_t);

SHARDRT_INSTANTIATE_NORM(float)
SHARDRT_INSTANTIATE_NORM(double)
#undef SHARDRT_INSTANTIATE_NORM

}  // namespace shardrt::kernels::cuda
