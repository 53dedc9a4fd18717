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
#include "tests/support/threads.h"

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

// Dense backward from the definition y[b,co,o] = bias[co] + Σ_ci,tap x[b,ci,o·s - p + tap·d] w[co,ci,tap].
inline void dense_conv_backward(const kernels::cpu::ConvGeometry& g, const Vec& x, const Vec& w, const Vec& gy,
                                Vec& gx, Vec& gw, Vec& gbias) {
  const int64_t in_vol = prod(g.in, 3), out_vol = prod(g.out, 3), taps = prod(g.kernel, 3);
  gx.assign(x.size(), 0.0);
  gw.assign(w.size(), 0.0);
  gbias.assign(g.c_out, 0.0);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t co = 0; co < g.c_out; ++co)
      for (int64_t o = 0; o < out_vol; ++o) {
        const double dy = gy[(b * g.c_out + co) * out_vol + o];
        gbias[co] += dy;
        const int64_t oi[3] = {o / (g.out[1] * g.out[2]), (o / g.out[2]) % g.out[1], o % g.out[2]};
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t ti[3] = {t / (g.kernel[1] * g.kernel[2]), (t / g.kernel[2]) % g.kernel[1], t % g.kernel[2]};
          int64_t at = 0;
          bool inside = true;
          for (int d = 0; d < 3; ++d) {
            const int64_t i = oi[d] * g.stride[d] - g.pad[d] + ti[d] * g.dilation[d];
            inside = inside && i >= 0 && i < g.in[d];
            at = at * g.in[d] + i;
          }
          if (!inside) continue;
          for (int64_t ci = 0; ci < g.c_in; ++ci) {
            const int64_t xi = (b * g.c_in + ci) * in_vol + at, wi = (co * g.c_in + ci) * taps + t;
            gx[xi] += dy * w[wi];
            gw[wi] += dy * x[xi];
          }
        }
      }
}

// Runs the f32 convolutions through `impl` (kernels/cpu/conv.h) for the scope's lifetime.
class ConvImplScope {
 public:
  explicit ConvImplScope(kernels::cpu::ConvImpl impl) : saved_(kernels::cpu::conv_impl()) {
    kernels::cpu::set_conv_impl(impl);
  }
  ~ConvImplScope() { kernels::cpu::set_conv_impl(saved_); }
  ConvImplScope(const ConvImplScope&) = delete;
  ConvImplScope& operator=(const ConvImplScope&) = delete;

 private:
  kernels::cpu::ConvImpl saved_;
};

// One f32 conv forward and backward (whatever path conv_impl() picks) on f32-rounded inputs, widened to fp64 for
// comparison; the parity tests of the oneDNN and Winograd paths share it. gx starts at 9 (it must be overwritten),
// gw and gbias at 0.25 (they accumulate: the 0.25 is taken away again before returning).
struct ConvF32Result {
  std::vector<double> y, gx, gw, gbias;
};

inline ConvF32Result run_conv_f32(const kernels::cpu::ConvGeometry& g, const std::vector<double>& x,
                                  const std::vector<double>& w, const std::vector<double>& bias,
                                  const std::vector<double>& gy) {
  const auto tx = cast<float>(x), tw = cast<float>(w), tb = cast<float>(bias), tgy = cast<float>(gy);
  std::vector<float> y(gy.size()), gx(x.size(), 9.0f), gw(w.size(), 0.25f), gbias(bias.size(), 0.25f);
  kernels::cpu::conv_forward<float>(g, tx.data(), tw.data(), tb.data(), y.data());
  kernels::cpu::conv_backward<float>(g, tx.data(), tw.data(), tgy.data(), gx.data(), gw.data(), gbias.data());
  ConvF32Result r{widen(y), widen(gx), widen(gw), widen(gbias)};
  for (double& e : r.gw) e -= 0.25;
  for (double& e : r.gbias) e -= 0.25;
  return r;
}

// Random f32-representable inputs of one convolution (seed, seed + 1, ...: x, w, bias, gy).
struct ConvF32Inputs {
  std::vector<double> x, w, bias, gy;
  ConvF32Inputs(const kernels::cpu::ConvGeometry& g, uint64_t seed)
      : x(widen(cast<float>(random_vec(g.batch * g.c_in * prod(g.in, 3), seed)))),
        w(widen(cast<float>(random_vec(g.c_out * g.c_in * prod(g.kernel, 3), seed + 1)))),
        bias(widen(cast<float>(random_vec(g.c_out, seed + 2)))),
        gy(widen(cast<float>(random_vec(g.batch * g.c_out * prod(g.out, 3), seed + 3)))) {}
};

inline void require_same(const ConvF32Result& a, const ConvF32Result& b, double tol) {
  require_close(a.y, b.y, tol);
  require_close(a.gx, b.gx, tol);
  require_close(a.gw, b.gw, tol);
  require_close(a.gbias, b.gbias, tol);
}

// The parity check of one fast f32 conv path (oneDNN, Winograd): what conv_impl() runs now against dense fp64
// loops (within tol), then against the im2col reference path (within 2 tol), which `runs_path` must say is not
// the fast one.
inline void require_conv_path_matches(const kernels::cpu::ConvGeometry& g, uint64_t seed, double tol,
                                      bool (*runs_path)(const kernels::cpu::ConvGeometry&)) {
  const ConvF32Inputs in(g, seed);
  ConvF32Result want;
  dense_conv_backward(g, in.x, in.w, in.gy, want.gx, want.gw, want.gbias);
  want.y = ref_conv(g, in.x, in.w, &in.bias);
  const ConvF32Result got = run_conv_f32(g, in.x, in.w, in.bias, in.gy);
  require_same(got, want, tol);
  ConvF32Result reference;
  {
    const ConvImplScope scope(kernels::cpu::ConvImpl::reference);
    CHECK(!runs_path(g));
    reference = run_conv_f32(g, in.x, in.w, in.bias, in.gy);
  }
  require_same(got, reference, 2 * tol);
}

// The f32 conv path conv_impl() picks gives the same bits at 1, 2 and 3 threads.
inline void require_conv_same_bits_across_threads(const kernels::cpu::ConvGeometry& g, uint64_t seed) {
  const ConvF32Inputs in(g, seed);
  ConvF32Result one, two, three;
  with_threads(1, [&] { one = run_conv_f32(g, in.x, in.w, in.bias, in.gy); });
  with_threads(2, [&] { two = run_conv_f32(g, in.x, in.w, in.bias, in.gy); });
  with_threads(3, [&] { three = run_conv_f32(g, in.x, in.w, in.bias, in.gy); });
  require_same(two, one, 0.0);
  require_same(three, one, 0.0);
}

}  // namespace shardrt::test
