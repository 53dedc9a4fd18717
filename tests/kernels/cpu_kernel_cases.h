// Input sets shared by more than one CPU-kernel test file: the (outer, n, inner) views of the dim ops, the
// attention shapes with their data, and the conv / pool / patch geometries.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"

namespace shardrt::test {

inline int64_t prod(const int64_t* dims, int n) {
  int64_t p = 1;
  for (int d = 0; d < n; ++d) p *= dims[d];
  return p;
}

// Odd sizes, inner == 1 and inner > 1, and an inner extent above one 256-column block.
inline const std::vector<View>& reduce_views() {
  static const std::vector<View> views = {{1, 1, 1}, {1, 7, 1}, {3, 33, 1},  {2, 7, 5},
                                          {1, 130, 3}, {4, 1, 33}, {2, 5, 300}, {5, 130, 1}};
  return views;
}

struct AttnShape {
  int64_t BH, Nq, Nk, D, Dv;
};

struct AttnData {
  AttnShape s;
  double scale;
  Vec q, k, v;
  explicit AttnData(AttnShape shape, uint64_t seed)
      : s(shape),
        scale(1.0 / std::sqrt(double(std::max<int64_t>(shape.D, 1)))),
        q(random_vec(s.BH * s.Nq * s.D, seed)),
        k(random_vec(s.BH * s.Nk * s.D, seed + 1)),
        v(random_vec(s.BH * s.Nk * s.Dv, seed + 2)) {
    // Spread the scores so the softmax is far from uniform and the online rescaling matters.
    for (double& e : q) e *= 3.0;
  }
  void forward(Vec& out, Vec& lse) const {
    out.assign(s.BH * s.Nq * s.Dv, 0.0);
    lse.assign(s.BH * s.Nq, 0.0);
    kernels::cpu::attention_forward<double>(s.BH, s.Nq, s.Nk, s.D, s.Dv, scale, q.data(), k.data(), v.data(),
                                            out.data(), lse.data());
  }
};

struct ConvCase {
  int nd;
  int64_t batch, c_in, c_out;
  std::vector<int64_t> in, kernel, stride, pad, dilation;
  kernels::cpu::ConvGeometry geometry() const {
    return kernels::cpu::make_conv_geometry(nd, batch, c_in, c_out, in.data(), kernel.data(), stride.data(),
                                            pad.data(), dilation.data());
  }
};

inline const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {1, 2, 3, 4, {11}, {3}, {2}, {1}, {2}},
      {2, 2, 2, 3, {7, 6}, {3, 2}, {2, 1}, {1, 0}, {1, 2}},
      {3, 1, 2, 2, {5, 4, 6}, {2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {2, 1, 1}},
      {2, 2, 3, 2, {4, 5}, {1, 1}, {1, 1}, {0, 0}, {1, 1}},  // pointwise: the input is its own im2col matrix
  };
  return cases;
}

}  // namespace shardrt::test
