#include "kernels/cuda/pool.h"

#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rounding.cuh"
#include "kernels/pool_window.h"
#include "runtime/cuda/stream.h"

namespace shardrt::kernels::cuda {
namespace {

// The window walk (taps of an output's window, windows reaching an input) is kernels/pool_window.h, shared with
// kernels/cpu/pool.cpp: the same taps in the same order on both backends.
using pool_window::for_each_tap;
using pool_window::for_each_window_reaching;
using pool_window::volume;

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
