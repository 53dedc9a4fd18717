#include "kernels/cuda/upsample.h"

#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rounding.cuh"
#include "runtime/cuda/stream.h"

namespace shardrt::kernels::cuda {
namespace {

// The resampling of one volume, with nd < 3 inputs given leading size-1 axes resampled by the identity (as
// kernels/cpu/upsample.cpp does), so every kernel works on three axes.
struct Resampling {
  bool linear = false;  // per axis: axes added for nd < 3 are nearest (in = out = 1)
  bool align_corners = false;
  bool axis_linear[3] = {false, false, false};
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  double scale[3] = {0, 0, 0};
};

Resampling make_resampling(UpsampleMode mode, bool align_corners, int nd, const int64_t* in, const int64_t* out) {
  Resampling r;
  r.linear = mode == UpsampleMode::linear;
  r.align_corners = align_corners;
  for (int d = 0; d < 3; ++d) {
    const int src_dim = d - (3 - nd);
    if (src_dim < 0) continue;
    r.in[d] = in[src_dim];
    r.out[d] = out[src_dim];
    r.axis_linear[d] = r.linear;
    r.scale[d] = align_corners ? (r.out[d] > 1 ? double(r.in[d] - 1) / double(r.out[d] - 1) : 0.0)
                               : double(r.in[d]) / double(r.out[d]);
  }
  return r;
}

// Tap t (0, or 1 for linear) of output index o along axis d: the input index it reads and its weight, with the
// CPU's formulas (kernels/cpu/upsample.cpp, axis_taps), every double operation rounded on its own.
template <typename T>
struct Tap {
  int64_t index;
  T weight;
};

__device__ inline int64_t linear_low(const Resampling& r, int d, int64_t o, double* frac) {
  const double s = r.scale[d];
  const double src = r.align_corners ? __dmul_rn(s, double(o))
                                     : fmax(__dadd_rn(__dmul_rn(s, __dadd_rn(double(o), 0.5)), -0.5), 0.0);
  int64_t lo = static_cast<int64_t>(src);
  if (lo > r.in[d] - 1) lo = r.in[d] - 1;
  if (frac) *frac = fmin(fmax(__dsub_rn(src, double(lo)), 0.0), 1.0);
  return lo;
}

// The first input index that output o reads along axis d (the only one for nearest); nondecreasing in o.
__device__ inline int64_t first_index_read(const Resampling& r, int d, int64_t o) {
  return r.axis_linear[d] ? linear_low(r, d, o, nullptr) : o * r.in[d] / r.out[d];
}

template <typename T>
__device__ inline Tap<T> tap(const Resampling& r, int d, int64_t o, int t) {
  if (!r.axis_linear[d]) return {o * r.in[d] / r.out[d], T(1)};
  double frac = 0;
  const int64_t lo = linear_low(r, d, o, &frac);
  if (t == 0) return {lo, T(1.0 - frac)};
  return {lo < r.in[d] - 1 ? lo + 1 : lo, T(frac)};
}

// The first output index o along axis d with first_index_read(o) >= v (out when there is none).
__device__ inline int64_t first_output_reading_at_least(const Resampling& r, int d, int64_t v) {
  int64_t lo = 0, hi = r.out[d];
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (first_index_read(r, d, mid) >= v) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

template <typename T>
__global__ void upsample_forward_kernel(Resampling r, int64_t total, const T* x, T* y) {
  const int taps = r.linear ? 2 : 1;
  const int64_t in_vol = r.in[0] * r.in[1] * r.in[2], out_vol = r.out[0] * r.out[1] * r.out[2];
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t plane = e / out_vol, p = e % out_vol;
    const int64_t o2 = p % r.out[2], o1 = (p / r.out[2]) % r.out[1], o0 = p / (r.out[2] * r.out[1]);
    const T* xp = x + plane * in_vol;
    T acc = T(0);
    for (int t0 = 0; t0 < (r.axis_linear[0] ? taps : 1); ++t0) {
      const Tap<T> a = tap<T>(r, 0, o0, t0);
      for (int t1 = 0; t1 < (r.axis_linear[1] ? taps : 1); ++t1) {
        const Tap<T> b = tap<T>(r, 1, o1, t1);
        const T w01 = mul_rn(a.weight, b.weight);
        const int64_t row = (a.index * r.in[1] + b.index) * r.in[2];
        for (int t2 = 0; t2 < (r.axis_linear[2] ? taps : 1); ++t2) {
          const Tap<T> c = tap<T>(r, 2, o2, t2);
          acc += mul_rn(mul_rn(w01, c.weight), xp[row + c.index]);
        }
      }
    }
    y[e] = acc;
  }
}

// Input (i0, i1, i2) sums w * gy over every (output, tap) that reads it, in increasing output position and tap
// order: the order in which the CPU kernel scatters.
template <typename T>
__global__ void upsample_backward_kernel(Resampling r, int64_t total, const T* gy, T* gx) {
  const int64_t in_vol = r.in[0] * r.in[1] * r.in[2], out_vol = r.out[0] * r.out[1] * r.out[2];
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t plane = e / in_vol, i = e % in_vol;
    const int64_t idx[3] = {i / (r.in[2] * r.in[1]), (i / r.in[2]) % r.in[1], i % r.in[2]};
    // Along each axis, the outputs whose first read index is idx - 1 (linear: their second tap may be idx) or
    // idx.
    int64_t begin[3], end[3];
    for (int d = 0; d < 3; ++d) {
      begin[d] = first_output_reading_at_least(r, d, r.axis_linear[d] ? idx[d] - 1 : idx[d]);
      end[d] = first_output_reading_at_least(r, d, idx[d] + 1);
    }
    const T* gyp = gy + plane * out_vol;
    T acc = T(0);
    for (int64_t o0 = begin[0]; o0 < end[0]; ++o0)
      for (int64_t o1 = begin[1]; o1 < end[1]; ++o1)
        for (int64_t o2 = begin[2]; o2 < end[2]; ++o2) {
          const T g = gyp[(o0 * r.out[1] + o1) * r.out[2] + o2];
          for (int t0 = 0; t0 < (r.axis_linear[0] ? 2 : 1); ++t0) {
            const Tap<T> a = tap<T>(r, 0, o0, t0);
            if (a.index != idx[0]) continue;
            for (int t1 = 0; t1 < (r.axis_linear[1] ? 2 : 1); ++t1) {
              const Tap<T> b = tap<T>(r, 1, o1, t1);
              if (b.index != idx[1]) continue;
              const T w01 = mul_rn(a.weight, b.weight);
              for (int t2 = 0; t2 < (r.axis_linear[2] ? 2 : 1); ++t2) {
                const Tap<T> c = tap<T>(r, 2, o2, t2);
                if (c.index == idx[2]) acc += mul_rn(mul_rn(w01, c.weight), g);
              }
            }
          }
        }
    gx[e] = acc;
  }
}

}  // namespace

template <typename T>
void upsample_forward(UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                      const int64_t* out, const T* x, T* y, cudaStream_t stream) {
  const Resampling r = make_resampling(mode, align_corners, nd, in, out);
  const int64_t total = planes * r.out[0] * r.out[1] * r.out[2];
  if (total == 0) return;
  upsample_forward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(r, total, x, y);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void upsample_backward(UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                       const int64_t* out, const T* gy, T* gx, cudaStream_t stream) {
  const Resampling r = make_resampling(mode, align_corners, nd, in, out);
  const int64_t total = planes * r.in[0] * r.in[1] * r.in[2];
  if (total == 0) return;
  upsample_backward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(r, total, gy, gx);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

#define SHARDRT_INSTANTIATE_UPSAMPLE(T)                                                                       \
  template void upsample_forward<T>(UpsampleMode, bool, int, int64_t, const int64_t*, const int64_t*, const T*, \
                                    T*, cudaStream_t);                                                          \
  template void upsample_backward<T>(UpsampleMode, bool, int, int64_t, const int64_t*, const int64_t*,          \
                                     const T*, T*, cudaStream_t);

SHARDRT_INSTANTIATE_UPSAMPLE(float)
SHARDRT_INSTANTIATE_UPSAMPLE(double)
#undef SHARDRT_INSTANTIATE_UPSAMPLE

}  // namespace shardrt::kernels::cuda
