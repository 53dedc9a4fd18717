#include "kernels/cuda/shape_ops.h"

#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "runtime/cuda/stream.h"

namespace shardrt::kernels::cuda {
namespace {

// The padding as a 3-d volume: leading size-1 axes with no padding for nd < 3 (as kernels/cpu/shape_ops.cpp).
struct PadVolume {
  PadMode mode;
  int64_t in[3], out[3], lo[3];
};

PadVolume make_volume(PadMode mode, int nd, const int64_t* in, const int64_t* pad_lo, const int64_t* pad_hi) {
  PadVolume v{mode, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}};
  for (int d = 0; d < 3; ++d) {
    const int src_dim = d - (3 - nd);
    if (src_dim < 0) continue;
    v.in[d] = in[src_dim];
    v.lo[d] = pad_lo[src_dim];
    v.out[d] = in[src_dim] + pad_lo[src_dim] + pad_hi[src_dim];
  }
  return v;
}

// The input index along axis d that output index o reads, or -1 for the constant fill (kernels/cpu/shape_ops.cpp,
// pad_source).
__device__ inline int64_t source_of(const PadVolume& v, int d, int64_t o) {
  const int64_t s = o - v.lo[d], n = v.in[d];
  switch (v.mode) {
    case PadMode::constant: return s >= 0 && s < n ? s : -1;
    case PadMode::replicate: return s < 0 ? 0 : (s > n - 1 ? n - 1 : s);
    case PadMode::circular: return (s % n + n) % n;
    case PadMode::reflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      const int64_t m = (s % period + period) % period;
      return m < n ? m : period - m;
    }
  }
  return -1;
}

template <typename T>
__global__ void pad_kernel(PadVolume v, int64_t total, T value, const T* x, T* y) {
  const int64_t in_vol = v.in[0] * v.in[1] * v.in[2], out_vol = v.out[0] * v.out[1] * v.out[2];
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t outer = e / out_vol, p = e % out_vol;
    const int64_t s0 = source_of(v, 0, p / (v.out[1] * v.out[2]));
    const int64_t s1 = source_of(v, 1, (p / v.out[2]) % v.out[1]);
    const int64_t s2 = source_of(v, 2, p % v.out[2]);
    y[e] = s0 < 0 || s1 < 0 || s2 < 0 ? value : x[outer * in_vol + (s0 * v.in[1] + s1) * v.in[2] + s2];
  }
}

// Input element (i0, i1, i2) sums the grads of every output that read it, in increasing output position.
template <typename T>
__global__ void pad_backward_kernel(PadVolume v, int64_t total, const T* gy, T* gx) {
  const int64_t in_vol = v.in[0] * v.in[1] * v.in[2], out_vol = v.out[0] * v.out[1] * v.out[2];
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t outer = e / in_vol, i = e % in_vol;
    const int64_t i0 = i / (v.in[1] * v.in[2]), i1 = (i / v.in[2]) % v.in[1], i2 = i % v.in[2];
    const T* gyo = gy + outer * out_vol;
    T acc = T(0);
    for (int64_t a = 0; a < v.out[0]; ++a) {
      if (source_of(v, 0, a) != i0) continue;
      for (int64_t b = 0; b < v.out[1]; ++b) {
        if (source_of(v, 1, b) != i1) continue;
        const T* row = gyo + (a * v.out[1] + b) * v.out[2];
        for (int64_t c = 0; c < v.out[2]; ++c)
          if (source_of(v, 2, c) == i2) acc += row[c];
      }
    }
    gx[e] = acc;
  }
}

}  // namespace

template <typename T>
void pad(PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* pad_lo, const int64_t* pad_hi,
         T value, const T* x, T* y, cudaStream_t stream) {
  const PadVolume v = make_volume(mode, nd, in, pad_lo, pad_hi);
  const int64_t total = outer * v.out[0] * v.out[1] * v.out[2];
  if (total <= 0) return;
  pad_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(v, total, value, x, y);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void pad_backward(PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* pad_lo,
                  const int64_t* pad_hi, const T* gy, T* gx, cudaStream_t stream) {
  const PadVolume v = make_volume(mode, nd, in, pad_lo, pad_hi);
  const int64_t total = outer * v.in[0] * v.in[1] * v.in[2];
  if (total <= 0) return;
  pad_backward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(v, total, gy, gx);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

#define SHARDRT_INSTANTIATE_PAD(T)                                                                                \
  template void pad<T>(PadMode, int, int64_t, const int64_t*, const int64_t*, const int64_t*, T, const T*, T*,    \
                       cudaStream_t);                                                                             \
  template void pad_backward<T>(PadMode, int, int64_t, const int64_t*, const int64_t*, const int64_t*, const T*, \
                                T*, cudaStream_t);

SHARDRT_INSTANTIATE_PAD(float)
SHARDRT_INSTANTIATE_PAD(double)
#undef SHARDRT_INSTANTIATE_PAD

}  // namespace shardrt::kernels::cuda
