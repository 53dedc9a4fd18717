#include "kernels/cuda/softmax.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.cuh"
#include "runtime/cuda/stream.h"

namespace shardrt::kernels::cuda {
namespace {

// std::max's rule, as the CPU kernel uses: a NaN input never becomes the shift, but still turns the sum of
// exponentials, and so the whole slice, into NaN.
template <typename T>
struct Max {
  __device__ T operator()(T a, T b) const { return a < b ? b : a; }
};

// The normaliser of a slice: log(total) for log-softmax, 1 / total for softmax.
template <typename T, bool Log>
__device__ T normaliser(double total) {
  return Log ? static_cast<T>(::log(total)) : static_cast<T>(1.0 / total);
}

// y from x, the slice's shift and normaliser. Each element is read and written by the same thread, after every
// read of the slice by the reductions, which is what makes y == x safe.
template <typename T, bool Log>
__device__ T softmax_value(T x, T shift, T factor) {
  if constexpr (Log) {
    return (x - shift) - factor;
  } else {
    return exp_of(x - shift) * factor;
  }
}

// gx from y, gy and the slice's sum (sum gy for log-softmax, sum gy * y for softmax).
template <typename T, bool Log>
__device__ T softmax_grad(T y, T gy, T dot) {
  if constexpr (Log) {
    return gy - exp_of(y) * dot;
  } else {
    return y * (gy - dot);
  }
}

// inner == 1: one block per contiguous row.
template <typename T, bool Log>
__global__ void softmax_rows_kernel(int64_t outer, int64_t n, const T* x, T* y) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * n;
    T* yr = y + o * n;
    T shift = kNegInf<T>;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) shift = Max<T>{}(shift, xr[k]);
    shift = block_allreduce(shift, kNegInf<T>, Max<T>{});
    double total = 0.0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) total += static_cast<double>(exp_of(xr[k] - shift));
    const T factor = normaliser<T, Log>(block_allreduce(total, 0.0, Add<double>{}));
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) yr[k] = softmax_value<T, Log>(xr[k], shift, factor);
  }
}

template <typename T, bool Log>
__global__ void softmax_backward_rows_kernel(int64_t outer, int64_t n, const T* y, const T* gy, T* gx) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* yr = y + o * n;
    const T* gyr = gy + o * n;
    T* gxr = gx + o * n;
    double acc = 0.0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      acc += Log ? static_cast<double>(gyr[k]) : static_cast<double>(gyr[k] * yr[k]);
    }
    const T dot = static_cast<T>(block_allreduce(acc, 0.0, Add<double>{}));
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) gxr[k] = softmax_grad<T, Log>(yr[k], gyr[k], dot);
  }
}

// inner > 1: one thread per (o, j) slice, walking k; neighbouring threads read neighbouring addresses.
template <typename T, bool Log>
__global__ void softmax_columns_kernel(int64_t outer, int64_t n, int64_t inner, const T* x, T* y) {
  for (int64_t c = first_index(); c < outer * inner; c += grid_stride()) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    const T* xc = x + base;
    T* yc = y + base;
    T shift = kNegInf<T>;
    for (int64_t k = 0; k < n; ++k) shift = Max<T>{}(shift, xc[k * inner]);
    double total = 0.0;
    for (int64_t k = 0; k < n; ++k) total += static_cast<double>(exp_of(xc[k * inner] - shift));
    const T factor = normaliser<T, Log>(total);
    for (int64_t k = 0; k < n; ++k) yc[k * inner] = softmax_value<T, Log>(xc[k * inner], shift, factor);
  }
}

template <typename T, bool Log>
__global__ void softmax_backward_columns_kernel(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy,
                                                T* gx) {
  for (int64_t c = first_index(); c < outer * inner; c += grid_stride()) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    const T* yc = y + base;
    const T* gyc = gy + base;
    T* gxc = gx + base;
    double acc = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      acc += Log ? static_cast<double>(gyc[k * inner]) : static_cast<double>(gyc[k * inner] * yc[k * inner]);
    }
    const T dot = static_cast<T>(acc);
    for (int64_t k = 0; k < n; ++k) gxc[k * inner] = softmax_grad<T, Log>(yc[k * inner], gyc[k * inner], dot);
  }
}

// Launches the row kernel (one block per row) when inner == 1, else the column kernel (one thread per slice).
template <typename... RowParams, typename... ColParams, typename... Args>
void launch_slices(int64_t outer, int64_t n, int64_t inner, cudaStream_t stream, void (*row_kernel)(RowParams...),
                   void (*column_kernel)(ColParams...), Args&&... args) {
  if (outer * n * inner == 0) return;
  if (inner == 1) {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(outer, kMaxBlocks));
    row_kernel<<<blocks, row_threads(n), 0, stream>>>(outer, n, std::forward<Args>(args)...);
  } else {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((outer * inner + kThreads - 1) / kThreads, kMaxBlocks));
    column_kernel<<<blocks, kThreads, 0, stream>>>(outer, n, inner, std::forward<Args>(args)...);
  }
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

template <typename T>
void softmax(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t stream) {
  launch_slices(outer, n, inner, stream, softmax_rows_kernel<T, false>, softmax_columns_kernel<T, false>, x, y);
}

template <typename T>
void softmax_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx, cudaStream_t stream) {
  launch_slices(outer, n, inner, stream, softmax_backward_rows_kernel<T, false>,
                softmax_backward_columns_kernel<T, false>, y, gy, gx);
}

template <typename T>
void log_softmax(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t stream) {
  launch_slices(outer, n, inner, stream, softmax_rows_kernel<T, true>, softmax_columns_kernel<T, true>, x, y);
}

template <typename T>
void log_softmax_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx,
                          cudaStream_t stream) {
  launch_slices(outer, n, inner, stream, softmax_backward_rows_kernel<T, true>,
                softmax_backward_columns_kernel<T, true>, y, gy, gx);
}

#define SHARDRT_INSTANTIATE_SOFTMAX(T)                                                                      \
  template void softmax<T>(int64_t, int64_t, int64_t, const T*, T*, cudaStream_t);                          \
  template void softmax_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, T*, cudaStream_t);       \
  template void log_softmax<T>(int64_t, int64_t, int64_t, const T*, T*, cudaStream_t);                      \
  template void log_softmax_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, T*, cudaStream_t);

SHARDRT_INSTANTIATE_SOFTMAX(float)
SHARDRT_INSTANTIATE_SOFTMAX(double)
#undef SHARDRT_INSTANTIATE_SOFTMAX

}  // namespace shardrt::kernels::cuda
