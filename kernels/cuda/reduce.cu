#include "kernels/cuda/reduce.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.cuh"
#include "runtime/cuda/stream.h"

namespace shardrt::kernels::cuda {
namespace {

template <typename T>
__device__ bool is_nan(T v) {
  return v != v;  // NaN is the only value unequal to itself
}

// A running max or min with the index where it was found; index < 0 means nothing seen yet.
template <typename T>
struct Extreme {
  T value;
  int64_t index;
};

template <typename T>
__device__ Extreme<T> shuffle_down(Extreme<T> e, int offset) {
  return {__shfl_down_sync(kFullMask, e.value, offset),
          static_cast<int64_t>(__shfl_down_sync(kFullMask, static_cast<long long>(e.index), offset))};
}

// The better of two extremes found over disjoint index sets, giving what a scan in increasing k would find:
// the first NaN if either holds one, else the larger (smaller) value, the lower index on ties.
template <typename T, bool Max>
struct CombineExtreme {
  __device__ Extreme<T> operator()(Extreme<T> a, Extreme<T> b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan) {
      if (Max ? a.value > b.value : a.value < b.value) return a;
      if (Max ? b.value > a.value : b.value < a.value) return b;
    }
    return a.index < b.index ? a : b;
  }
};

// NaN-propagating max: the shift of logsumexp must be NaN when the row holds one.
template <typename T>
struct NanMax {
  __device__ T operator()(T a, T b) const { return (a > b || is_nan(a)) ? a : b; }
};

// ---- inner == 1: one block per row (rows are contiguous) ----

template <typename T>
__global__ void sum_rows_kernel(int64_t outer, int64_t n, const T* x, double scale, T* y) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* row = x + o * n;
    double acc = 0.0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) acc += static_cast<double>(row[k]);
    acc = block_allreduce(acc, 0.0, Add<double>{});
    if (threadIdx.x == 0) y[o] = static_cast<T>(acc * scale);
  }
}

// y may be null (argmax only).
template <typename T, bool Max>
__global__ void extreme_rows_kernel(int64_t outer, int64_t n, const T* x, T* y, int64_t* idx) {
  const CombineExtreme<T, Max> combine;
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* row = x + o * n;
    Extreme<T> best{T(0), -1};
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) best = combine(best, Extreme<T>{row[k], k});
    best = block_allreduce(best, Extreme<T>{T(0), -1}, combine);
    if (threadIdx.x == 0) {
      if (y) y[o] = best.value;
      idx[o] = best.index;
    }
  }
}

template <typename T>
__global__ void logsumexp_rows_kernel(int64_t outer, int64_t n, const T* x, T* y) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* row = x + o * n;
    T shift = kNegInf<T>;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) shift = NanMax<T>{}(shift, row[k]);
    shift = block_allreduce(shift, kNegInf<T>, NanMax<T>{});
    // A non-finite maximum is the answer itself (-inf: all -inf; +inf; NaN), and shifting by it would give NaN.
    if (!isfinite(shift)) {
      if (threadIdx.x == 0) y[o] = shift;
      continue;
    }
    double acc = 0.0;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) acc += static_cast<double>(exp_of(row[k] - shift));
    acc = block_allreduce(acc, 0.0, Add<double>{});
    if (threadIdx.x == 0) y[o] = shift + static_cast<T>(::log(acc));
  }
}

// ---- inner > 1: one thread per (o, j) column, walking k; neighbouring threads read neighbouring addresses ----

template <typename T>
__global__ void sum_columns_kernel(int64_t outer, int64_t n, int64_t inner, const T* x, double scale, T* y) {
  for (int64_t c = first_index(); c < outer * inner; c += grid_stride()) {
    const T* col = x + (c / inner) * n * inner + c % inner;
    double acc = 0.0;
    for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(col[k * inner]);
    y[c] = static_cast<T>(acc * scale);
  }
}

template <typename T, bool Max>
__global__ void extreme_columns_kernel(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx) {
  const CombineExtreme<T, Max> combine;
  for (int64_t c = first_index(); c < outer * inner; c += grid_stride()) {
    const T* col = x + (c / inner) * n * inner + c % inner;
    Extreme<T> best{T(0), -1};
    for (int64_t k = 0; k < n; ++k) best = combine(best, Extreme<T>{col[k * inner], k});
    if (y) y[c] = best.value;
    idx[c] = best.index;
  }
}

template <typename T>
__global__ void logsumexp_columns_kernel(int64_t outer, int64_t n, int64_t inner, const T* x, T* y) {
  for (int64_t c = first_index(); c < outer * inner; c += grid_stride()) {
    const T* col = x + (c / inner) * n * inner + c % inner;
    T shift = kNegInf<T>;
    for (int64_t k = 0; k < n; ++k) shift = NanMax<T>{}(shift, col[k * inner]);
    if (!isfinite(shift)) {
      y[c] = shift;
      continue;
    }
    double acc = 0.0;
    for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(exp_of(col[k * inner] - shift));
    y[c] = shift + static_cast<T>(::log(acc));
  }
}

// ---- backward: one thread per input element i = (o, k, j) ----

// gx[o, k, j] = gy[o, j] * scale (scale 1 for sum, 1/n for mean).
template <typename T>
__global__ void broadcast_back_kernel(int64_t outer, int64_t n, int64_t inner, const T* gy, T scale, T* gx) {
  for (int64_t i = first_index(); i < outer * n * inner; i += grid_stride()) {
    gx[i] = gy[(i / (n * inner)) * inner + i % inner] * scale;
  }
}

template <typename T>
__global__ void index_back_kernel(int64_t outer, int64_t n, int64_t inner, const int64_t* idx, const T* gy, T* gx) {
  for (int64_t i = first_index(); i < outer * n * inner; i += grid_stride()) {
    const int64_t out = (i / (n * inner)) * inner + i % inner;
    const int64_t k = (i / inner) % n;
    gx[i] = idx[out] == k ? gy[out] : T(0);
  }
}

template <typename T>
__global__ void logsumexp_back_kernel(int64_t outer, int64_t n, int64_t inner, const T* x, const T* y, const T* gy,
                                      T* gx) {
  for (int64_t i = first_index(); i < outer * n * inner; i += grid_stride()) {
    const int64_t out = (i / (n * inner)) * inner + i % inner;
    const T lse = y[out];
    gx[i] = lse == kNegInf<T> ? T(0) : gy[out] * exp_of(x[i] - lse);
  }
}

// Launches a row kernel (one block per row, inner == 1) or a column kernel (one thread per output).
template <typename... RowParams, typename... ColParams, typename... Args>
void launch_reduction(int64_t outer, int64_t n, int64_t inner, cudaStream_t stream,
                      void (*row_kernel)(RowParams...), void (*column_kernel)(ColParams...), Args&&... args) {
  if (outer * inner == 0) return;
  if (inner == 1) {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(outer, kMaxBlocks));
    row_kernel<<<blocks, row_threads(n), 0, stream>>>(outer, n, std::forward<Args>(args)...);
  } else {
    column_kernel<<<blocks_for(outer * inner, kThreads), kThreads, 0, stream>>>(outer, n, inner,
                                                                                 std::forward<Args>(args)...);
  }
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

// Launches an elementwise backward kernel over all outer * n * inner inputs.
template <typename... Params, typename... Args>
void launch_backward(int64_t outer, int64_t n, int64_t inner, cudaStream_t stream, void (*kernel)(Params...),
                     Args&&... args) {
  const int64_t total = outer * n * inner;
  if (total == 0) return;
  kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(outer, n, inner, std::forward<Args>(args)...);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T, bool Max>
void reduce_extreme(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx, cudaStream_t stream) {
  if (n == 0) return;
  launch_reduction(outer, n, inner, stream, extreme_rows_kernel<T, Max>, extreme_columns_kernel<T, Max>, x, y, idx);
}

}  // namespace

template <typename T>
void reduce_sum(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t stream) {
  launch_reduction(outer, n, inner, stream, sum_rows_kernel<T>, sum_columns_kernel<T>, x, 1.0, y);
}

template <typename T>
void reduce_mean(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t stream) {
  // 1/0 = inf times the empty sum 0 gives the NaN that the mean of nothing should be.
  launch_reduction(outer, n, inner, stream, sum_rows_kernel<T>, sum_columns_kernel<T>, x, 1.0 / static_cast<double>(n),
                   y);
}

template <typename T>
void reduce_max(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx, cudaStream_t stream) {
  reduce_extreme<T, true>(outer, n, inner, x, y, idx, stream);
}

template <typename T>
void reduce_min(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx, cudaStream_t stream) {
  reduce_extreme<T, false>(outer, n, inner, x, y, idx, stream);
}

template <typename T>
void reduce_argmax(int64_t outer, int64_t n, int64_t inner, const T* x, int64_t* idx, cudaStream_t stream) {
  reduce_extreme<T, true>(outer, n, inner, x, static_cast<T*>(nullptr), idx, stream);
}

template <typename T>
void reduce_logsumexp(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t stream) {
  launch_reduction(outer, n, inner, stream, logsumexp_rows_kernel<T>, logsumexp_columns_kernel<T>, x, y);
}

template <typename T>
void reduce_sum_backward(int64_t outer, int64_t n, int64_t inner, const T* gy, T* gx, cudaStream_t stream) {
  launch_backward(outer, n, inner, stream, broadcast_back_kernel<T>, gy, T(1), gx);
}

template <typename T>
void reduce_mean_backward(int64_t outer, int64_t n, int64_t inner, const T* gy, T* gx, cudaStream_t stream) {
  launch_backward(outer, n, inner, stream, broadcast_back_kernel<T>, gy, T(1) / static_cast<T>(n), gx);
}

template <typename T>
void reduce_index_backward(int64_t outer, int64_t n, int64_t inner, const int64_t* idx, const T* gy, T* gx,
                           cudaStream_t stream) {
  launch_backward(outer, n, inner, stream, index_back_kernel<T>, idx, gy, gx);
}

template <typename T>
void reduce_logsumexp_backward(int64_t outer, int64_t n, int64_t inner, const T* x, const T* y, const T* gy, T* gx,
                               cudaStream_t stream) {
  launch_backward(outer, n, inner, stream, logsumexp_back_kernel<T>, x, y, gy, gx);
}

#define SHARDRT_INSTANTIATE_REDUCE(T)                                                                                \
  template void reduce_sum<T>(int64_t, int64_t, int64_t, const T*, T*, cudaStream_t);                                \
  template void reduce_mean<T>(int64_t, int64_t, int64_t, const T*, T*, cudaStream_t);                               \
  template void reduce_max<T>(int64_t, int64_t, int64_t, const T*, T*, int64_t*, cudaStream_t);                      \
  template void reduce_min<T>(int64_t, int64_t, int64_t, const T*, T*, int64_t*, cudaStream_t);                      \
  template void reduce_argmax<T>(int64_t, int64_t, int64_t, const T*, int64_t*, cudaStream_t);                       \
  template void reduce_logsumexp<T>(int64_t, int64_t, int64_t, const T*, T*, cudaStream_t);                          \
  template void reduce_sum_backward<T>(int64_t, int64_t, int64_t, const T*, T*, cudaStream_t);                       \
  template void reduce_mean_backward<T>(int64_t, int64_t, int64_t, const T*, T*, cudaStream_t);                      \
  template void reduce_index_backward<T>(int64_t, int64_t, int64_t, const int64_t*, const T*, T*, cudaStream_t);     \
  template void reduce_logsumexp_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, T*,             \
                                             cudaStream_t);

SHARDRT_INSTANTIATE_REDUCE(float)
SHARDRT_INSTANTIATE_REDUCE(double)
#undef SHARDRT_INSTANTIATE_REDUCE

}  // namespace shardrt::kernels::cuda
