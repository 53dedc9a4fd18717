#include "kernels/cuda/pool.h"

#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rounding.cuh"
#include "runtime/cuda/stream.h"

namespace shardrt::kernels::cuda {
namespace {

__host__ __device__ inline int64_t volume(const int64_t* dims) { return dims[0] * dims[1] * dims[2]; }

// Calls visit(src) for every tap of output position (o0, o1, o2)'s window inside the input, in tap order (the
// order of kernels/cpu/pool.cpp), src being the tap's flat position within the input plane.
template <typename Visit>
__device__ void for_each_tap(const ConvGeometry& g, int64_t o0, int64_t o1, int64_t o2, Visit&& visit) {
  for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0) {
    const int64_t i0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dilation[0];
    if (i0 < 0 || i0 >= g.in[0]) continue;
    for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1) {
      const int64_t i1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dilation[1];
      if (i1 < 0 || i1 >= g.in[1]) continue;
      for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
        const int64_t i2 = o2 * g.stride[2] - g.pad[2] + k2 * g.dilation[2];
        if (i2 < 0 || i2 >= g.in[2]) continue;
        visit((i0 * g.in[1] + i1) * g.in[2] + i2);
      }
    }
  }
}

// The output index along dim d whose window's tap k lands on input index i, or -1 when none does.
__device__ inline int64_t window_of(const ConvGeometry& g, int d, int64_t i, int64_t k) {
  const int64_t num = i + g.pad[d] - k * g.dilation[d];
  if (num < 0 || num % g.stride[d] != 0) return -1;
  const int64_t o = num / g.stride[d];
  return o < g.out[d] ? o : -1;
}

// Calls visit(p) for every output position p (flat within the plane) whose window reaches input position
// (i0, i1, i2), in increasing p: a window reaches an input through one tap at most, and running the taps
// backwards runs the outputs forwards. The CPU's scatter adds in that same order, so the sums agree bit for bit.
template <typename Visit>
__device__ void for_each_window_reaching(const ConvGeometry& g, int64_t i0, int64_t i1, int64_t i2, Visit&& visit) {
  for (int64_t k0 = g.kernel[0] - 1; k0 >= 0; --k0) {
    const int64_t o0 = window_of(g, 0, i0, k0);
    if (o0 < 0) continue;
    for (int64_t k1 = g.kernel[1] - 1; k1 >= 0; --k1) {
      const int64_t o1 = window_of(g, 1, i1, k1);
      if (o1 < 0) continue;
      for (int64_t k2 = g.kernel[2] - 1; k2 >= 0; --k2) {
        const int64_t o2 = window_of(g, 2, i2, k2);
        if (o2 < 0) continue;
        visit((o0 * g.out[1] + o1) * g.out[2] + o2);
      }
    }
  }
}

// One thread per output element (plane, o0, o1, o2).
template <typename T>
__global__ void avg_pool_forward_kernel(ConvGeometry g, int64_t total, const T* x, T* y) {
  const int64_t in_vol = volume(g.in), out_vol = volume(g.out);
  const T inv_count = T(1) / T(volume(g.kernel));
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t plane = e / out_vol, p = e % out_vol;
    const int64_t o2 = p % g.out[2], o1 = (p / g.out[2]) % g.out[1], o0 = p / (g.out[2] * g.out[1]);
    const T* xp = x + plane * in_vol;
    T acc = T(0);
    for_each_tap(g, o0, o1, o2, [&](int64_t src) { acc += xp[src]; });
    y[e] = acc * inv_count;
  }
}

// One thread per input element: the sum of the shares of every window that reaches it.
template <typename T>
__global__ void avg_pool_backward_kernel(ConvGeometry g, int64_t total, const T* gy, T* gx) {
  const int64_t in_vol = volume(g.in), out_vol = volume(g.out);
  const T inv_count = T(1) / T(volume(g.kernel));
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t plane = e / in_vol, i = e % in_vol;
    const int64_t i2 = i % g.in[2], i1 = (i / g.in[2]) % g.in[1], i0 = i / (g.in[2] * g.in[1]);
    const T* gyp = gy + plane * out_vol;
    T acc = T(0);
    for_each_window_reaching(g, i0, i1, i2, [&](int64_t p) { acc += mul_rn(gyp[p], inv_count); });
    gx[e] = acc;
  }
}

template <typename T>
__global__ void max_pool_forward_kernel(ConvGeometry g, int64_t total, const T* x, T* y, int64_t* argmax) {
  const int64_t in_vol = volume(g.in), out_vol = volume(g.out);
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t plane = e / out_vol, p = e % out_vol;
    const int64_t o2 = p % g.out[2], o1 = (p / g.out[2]) % g.out[1], o0 = p / (g.out[2] * g.out[1]);
    const T* xp = x + plane * in_vol;
    T best = kNegInf<T>;
    int64_t best_at = -1;
    for_each_tap(g, o0, o1, o2, [&](int64_t src) {
      const T v = xp[src];
      if (best_at < 0 || v > best || isnan(v)) {
        best = v;
        best_at = src;
      }
    });
    y[e] = best;
    argmax[e] = best_at;
  }
}

// One thread per input element: the grads of the windows it won.
template <typename T>
__global__ void max_pool_backward_kernel(ConvGeometry g, int64_t total, const T* gy, const int64_t* argmax, T* gx) {
  const int64_t in_vol = volume(g.in), out_vol = volume(g.out);
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t plane = e / in_vol, i = e % in_vol;
    const int64_t i2 = i % g.in[2], i1 = (i / g.in[2]) % g.in[1], i0 = i / (g.in[2] * g.in[1]);
    const T* gyp = gy + plane * out_vol;
    const int64_t* ap = argmax + plane * out_vol;
    T acc = T(0);
    for_each_window_reaching(g, i0, i1, i2, [&](int64_t p) {
      if (ap[p] == i) acc += gyp[p];
    });
    gx[e] = acc;
  }
}

}  // namespace

template <typename T>
void avg_pool_forward(const ConvGeometry& g, const T* x, T* y, cudaStream_t stream) {
  const int64_t total = g.batch * g.c_in * volume(g.out);
  if (total == 0) return;
  avg_pool_forward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(g, total, x, y);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void avg_pool_backward(const ConvGeometry& g, const T* gy, T* gx, cudaStream_t stream) {
  const int64_t total = g.batch * g.c_in * volume(g.in);
  if (total == 0) return;
  avg_pool_backward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(g, total, gy, gx);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void max_pool_forward(const ConvGeometry& g, const T* x, T* y, int64_t* argmax, cudaStream_t stream) {
  const int64_t total = g.batch * g.c_in * volume(g.out);
  if (total == 0) return;
  max_pool_forward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(g, total, x, y, argmax);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void max_pool_backward(const ConvGeometry& g, const T* gy, const int64_t* argmax, T* gx, cudaStream_t stream) {
  const int64_t total = g.batch * g.c_in * volume(g.in);
  if (total == 0) return;
  max_pool_backward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(g, total, gy, argmax, gx);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

#define SHARDRT_INSTANTIATE_POOL(T)                                                                \
  template void avg_pool_forward<T>(const ConvGeometry&, const T*, T*, cudaStream_t);              \
  template void avg_pool_backward<T>(const ConvGeometry&, const T*, T*, cudaStream_t);             \
  template void max_pool_forward<T>(const ConvGeometry&, const T*, T*, int64_t*, cudaStream_t);    \
  template void max_pool_backward<T>(const ConvGeometry&, const T*, const int64_t*, T*, cudaStream_t);

SHARDRT_INSTANTIATE_POOL(float)
SHARDRT_INSTANTIATE_POOL(double)
#undef SHARDRT_INSTANTIATE_POOL

}  // namespace shardrt::kernels::cuda
