#include "runtime/cuda/random_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "runtime/cuda/stream.h"

namespace shardrt {

namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU; larger draws loop over the grid.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

// a + (b - a) * u with every operation rounded on its own. nvcc would otherwise contract the expression in
// sample_f32/sample_f64 into a fused multiply-add, which rounds once and can differ from the host in the last
// bit; the uniform draw is promised bit-exact.
__device__ float uniform_in(float a, float b, float u) { return __fadd_rn(a, __fmul_rn(__fsub_rn(b, a), u)); }
__device__ double uniform_in(double a, double b, double u) { return __dadd_rn(a, __dmul_rn(__dsub_rn(b, a), u)); }

// Element i of the draw, from the same Philox words and uniform mapping as the host (random_fill.h).
template <typename T, philox::Distribution Dist>
__global__ void philox_fill_kernel(T* dst, int64_t n, uint64_t seed, uint64_t offset, T a, T b) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    const uint64_t index = static_cast<uint64_t>(i);
    if constexpr (Dist == philox::Distribution::uniform) {
      const philox::U32x4 w = philox::element_bits(seed, offset, index);
      if constexpr (std::is_same_v<T, float>) {
        dst[i] = uniform_in(a, b, philox::uniform_f32(w.v[0]));
      } else {
        dst[i] = uniform_in(a, b, philox::uniform_f64(w.v[0], w.v[1]));
      }
    } else if constexpr (std::is_same_v<T, float>) {
      dst[i] = philox::sample_f32(Dist, seed, offset, index, a, b);
    } else {
      dst[i] = philox::sample_f64(Dist, seed, offset, index, a, b);
    }
  }
}

template <typename T>
void launch(cudaStream_t stream, T* dst, int64_t n, philox::Distribution dist, uint64_t seed, uint64_t offset, T a,
            T b) {
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
  if (dist == philox::Distribution::uniform) {
    philox_fill_kernel<T, philox::Distribution::uniform><<<blocks, kThreads, 0, stream>>>(dst, n, seed, offset, a, b);
  } else {
    philox_fill_kernel<T, philox::Distribution::normal><<<blocks, kThreads, 0, stream>>>(dst, n, seed, offset, a, b);
  }
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void philox_fill_cuda(int device, void* dst, DType dtype, int64_t n, philox::Distribution dist, uint64_t seed,
                      uint64_t offset, double a, double b) {
  SHARDRT_CHECK(dtype == DType::f32 || dtype == DType::f64, DTypeError, "philox_fill_cuda: draws f32 or f64, got ",
                dtype_name(dtype));
  if (n == 0) return;
  cudaStream_t stream = current_stream(device);
  if (dtype == DType::f64) {
    launch(stream, static_cast<double*>(dst), n, dist, seed, offset, a, b);
  } else {
    // The host draws f32 with the bounds rounded to float first (factories.cpp); so does this.
    launch(stream, static_cast<float*>(dst), n, dist, seed, offset, static_cast<float>(a), static_cast<float>(b));
  }
}

}  // namespace shardrt
