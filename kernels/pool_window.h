// The window walk of pooling, shared by kernels/cpu/pool.cpp and kernels/cuda/pool.cu so both backends visit the
// same taps in the same order (their sums then agree bit for bit): which input positions an output position's
// window covers (stride, padding, dilation; taps in the padding skipped), and the reverse, which output windows
// reach an input position (the CUDA backwards gather per input instead of scattering per output). The window is
// a ConvGeometry (kernels/cpu/conv.h); unused trailing dims have extent 1. Header-only, host and device.
#pragma once
#include <cstdint>

#include "kernels/cpu/conv.h"

#ifdef __CUDACC__
#define SHARDRT_HOST_DEVICE __host__ __device__
// The visitors are device lambdas in the kernels and host lambdas on the CPU; nvcc checks a host-device template's
// calls only where it is instantiated, once this is said.
#define SHARDRT_HOST_DEVICE_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define SHARDRT_HOST_DEVICE
#define SHARDRT_HOST_DEVICE_TEMPLATE
#endif

namespace shardrt::kernels::pool_window {

using kernels::cpu::ConvGeometry;

SHARDRT_HOST_DEVICE inline int64_t volume(const int64_t* dims) { return dims[0] * dims[1] * dims[2]; }

// Calls visit(src) for every tap of output position (o0, o1, o2)'s window that lies inside the input, in tap
// order (k0, then k1, then k2), src being the tap's flat position within the input plane.
SHARDRT_HOST_DEVICE_TEMPLATE
template <typename Visit>
SHARDRT_HOST_DEVICE inline void for_each_tap(const ConvGeometry& g, int64_t o0, int64_t o1, int64_t o2,
                                             Visit&& visit) {
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
SHARDRT_HOST_DEVICE inline int64_t window_of(const ConvGeometry& g, int d, int64_t i, int64_t k) {
  const int64_t num = i + g.pad[d] - k * g.dilation[d];
  if (num < 0 || num % g.stride[d] != 0) return -1;
  const int64_t o = num / g.stride[d];
  return o < g.out[d] ? o : -1;
}

// Calls visit(p) for every output position p (flat within the plane) whose window reaches input position
// (i0, i1, i2), in increasing p: a window reaches an input through one tap at most, and running the taps
// backwards runs the outputs forwards — the order in which a scatter over for_each_tap adds into that input.
SHARDRT_HOST_DEVICE_TEMPLATE
template <typename Visit>
SHARDRT_HOST_DEVICE inline void for_each_window_reaching(const ConvGeometry& g, int64_t i0, int64_t i1, int64_t i2,
                                                         Visit&& visit) {
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

}  // namespace shardrt::kernels::pool_window
