// Group normalisation on a CUDA device; the contract is in kernels/cuda/norm.h.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/norm.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda/stream_scratch.h"

namespace shardrt::kernels::cuda {
namespace {

__device__ double block_sum(double v) { return block_allreduce(v, 0.0, Add<double>{}); }

unsigned capped_blocks(int64_t n) { return static_cast<unsigned>(std::min<int64_t>(n, kMaxBlocks)); }

// One block per (sample, group) block of Cg * S contiguous elements: mean, then the mean squared deviation, both
// in double; then y = x * scale + shift with the per-channel fold the CPU uses.
template <typename T>
__global__ void groupnorm_kernel(int64_t NG, int64_t G, int64_t Cg, int64_t S, const T* x, const T* weight,
                                 const T* bias, T eps, T* y, T* mean, T* rstd) {
  const int64_t L = Cg * S;
  for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x) {
    const T* xg = x + ng * L;
    T* yg = y + ng * L;
    double acc = 0.0;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) acc += static_cast<double>(xg[j]);
    const double mu = block_sum(acc) / static_cast<double>(L);
    acc = 0.0;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const double d = static_cast<double>(xg[j]) - mu;
      acc += d * d;
    }
    const double rs = 1.0 / ::sqrt(block_sum(acc) / static_cast<double>(L) + static_cast<double>(eps));
    if (threadIdx.x == 0) {
      mean[ng] = static_cast<T>(mu);
      rstd[ng] = static_cast<T>(rs);
    }
    const int64_t c0 = (ng % G) * Cg;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const int64_t c = c0 + j / S;
      const double scale = rs * (weight ? static_cast<double>(weight[c]) : 1.0);
      const double shift = (bias ? static_cast<double>(bias[c]) : 0.0) - mu * scale;
      yg[j] = static_cast<T>(static_cast<double>(xg[j]) * scale + shift);
    }
  }
}

// One block per (sample, channel) row of S elements: sum(gy * xhat) and sum(gy), into partial[(n*C + c)*2 + {0,1}].
template <typename T>
__global__ void groupnorm_channel_sums_kernel(int64_t NC, int64_t C, int64_t G, int64_t S, const T* x,
                                              const T* mean, const T* rstd, const T* gy, double* partial) {
  const int64_t Cg = C / G;
  for (int64_t nc = blockIdx.x; nc < NC; nc += gridDim.x) {
    const int64_t n = nc / C, c = nc % C, ng = n * G + c / Cg;
    const T mu = mean[ng], rs = rstd[ng];
    const T* xc = x + nc * S;
    const T* gyc = gy + nc * S;
    double dot = 0.0, sum = 0.0;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
      const T xhat = (xc[s] - mu) * rs;
      dot += static_cast<double>(gyc[s] * xhat);
      sum += static_cast<double>(gyc[s]);
    }
    dot = block_sum(dot);
    sum = block_sum(sum);
    if (threadIdx.x == 0) {
      partial[nc * 2] = dot;
      partial[nc * 2 + 1] = sum;
    }
  }
}

// One block per (sample, group): gx = rstd * (gy * w - mean(g) - xhat * mean(g * xhat)) with g = gy * w, the
// group means folded from the channel sums in channel order.
template <typename T>
__global__ void groupnorm_input_grad_kernel(int64_t NG, int64_t C, int64_t G, int64_t S, const T* x, const T* weight,
                                            const T* mean, const T* rstd, const T* gy, const double* partial, T* gx) {
  const int64_t Cg = C / G, L = Cg * S;
  for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x) {
    const int64_t n = ng / G, c0 = (ng % G) * Cg;
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (int64_t ci = 0; ci < Cg; ++ci) {
      const int64_t c = c0 + ci;
      const double w = weight ? static_cast<double>(weight[c]) : 1.0;
      sum_g += w * partial[(n * C + c) * 2 + 1];
      sum_g_xhat += w * partial[(n * C + c) * 2];
    }
    const T mean_g = static_cast<T>(sum_g / static_cast<double>(L));
    const T mean_g_xhat = static_cast<T>(sum_g_xhat / static_cast<double>(L));
    const T mu = mean[ng], rs = rstd[ng];
    const T* xg = x + ng * L;
    const T* gyg = gy + ng * L;
    T* gxg = gx + ng * L;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const T w = weight ? weight[c0 + j / S] : T(1);
      gxg[j] = rs * (gyg[j] * w - mean_g - (xg[j] - mu) * rs * mean_g_xhat);
    }
  }
}

// Channel c adds its partials over the samples in order onto gweight[c] / gbias[c] (either may be null).
template <typename T>
__global__ void groupnorm_param_grads_kernel(int64_t N, int64_t C, const double* partial, T* gweight, T* gbias) {
  for (int64_t c = first_index(); c < C; c += grid_stride()) {
    double sum_w = 0.0, sum_b = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      sum_w += partial[(n * C + c) * 2];
      sum_b += partial[(n * C + c) * 2 + 1];
    }
    if (gweight) gweight[c] += static_cast<T>(sum_w);
    if (gbias) gbias[c] += static_cast<T>(sum_b);
  }
}

}  // namespace

template <typename T>
void groupnorm(int64_t N, int64_t C, int64_t S, int64_t G, const T* x, const T* weight, const T* bias, T eps, T* y,
               T* mean, T* rstd, cudaStream_t stream) {
  const int64_t NG = N * G, Cg = C / G;
  if (NG == 0 || Cg * S == 0) return;
  groupnorm_kernel<T><<<capped_blocks(NG), row_threads(Cg * S), 0, stream>>>(NG, G, Cg, S, x, weight, bias, eps, y,
                                                                            mean, rstd);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void groupnorm_backward(int64_t N, int64_t C, int64_t S, int64_t G, const T* x, const T* weight, const T* mean,
                        const T* rstd, const T* gy, T* gx, T* gweight, T* gbias, cudaStream_t stream) {
  if (N * C * S == 0 || (!gx && !gweight && !gbias)) return;
  StreamScratch partial(static_cast<std::size_t>(N * C * 2) * sizeof(double), stream);
  groupnorm_channel_sums_kernel<T><<<capped_blocks(N * C), row_threads(S), 0, stream>>>(
      N * C, C, G, S, x, mean, rstd, gy, partial.as<double>());
  SHARDRT_CUDA_CHECK(cudaGetLastError());
  if (gx) {
    groupnorm_input_grad_kernel<T><<<capped_blocks(N * G), row_threads((C / G) * S), 0, stream>>>(
        N * G, C, G, S, x, weight, mean, rstd, gy, partial.as<double>(), gx);
    SHARDRT_CUDA_CHECK(cudaGetLastError());
  }
  if (gweight || gbias) {
    groupnorm_param_grads_kernel<T><<<blocks_for(C, kThreads), kThreads, 0, stream>>>(N, C, partial.as<double>(),
                                                                                      gweight, gbias);
    SHARDRT_CUDA_CHECK(cudaGetLastError());
  }
}

#define SHARDRT_INSTANTIATE_GROUPNORM(T)                                                                         \
  template void groupnorm<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*, const T*, T, T*, T*, T*,    \
                             cudaStream_t);                                                                      \
  template void groupnorm_backward<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*, \
                                      const T*, T*, T*, T*, cudaStream_t);

SHARDRT_INSTANTIATE_GROUPNORM(float)
SHARDRT_INSTANTIATE_GROUPNORM(double)
#undef SHARDRT_INSTANTIATE_GROUPNORM

}  // namespace shardrt::kernels::cuda
