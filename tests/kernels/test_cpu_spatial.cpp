// CPU kernels for attention, convolution, pooling, resampling, indexing and shape ops: every forward against a
// plain double-precision reference loop written here, every backward against central finite differences of
// its forward.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/index.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/shape_ops.h"
#include "kernels/cpu/upsample.h"

namespace cpu = shardrt::kernels::cpu;

namespace {

using Vec = std::vector<double>;

Vec random_vec(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Vec v(n);
  for (double& e : v) e = dist(gen);
  return v;
}

std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

double dot(const Vec& a, const Vec& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

int64_t prod(const int64_t* dims, int n) {
  int64_t p = 1;
  for (int d = 0; d < n; ++d) p *= dims[d];
  return p;
}

// Largest |got - want| / (1 + |want|), NaN counting as infinite.
template <typename T>
void require_close(const std::vector<T>& got, const Vec& want, double tol) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]) / (1.0 + std::abs(want[i]));
    if (std::isnan(err) || err > worst) {
      worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
      worst_at = i;
    }
  }
  INFO("worst at " << worst_at << ": got " << (got.empty() ? 0.0 : double(got[worst_at])) << ", want "
                   << (want.empty() ? 0.0 : want[worst_at]));
  REQUIRE(worst <= tol);
}

// Central differences of loss() in each coordinate of x (an evenly spread subset of at most max_probes when x is
// large) against the analytic gradient. The gradient must not be identically zero, so the check cannot pass
// vacuously.
void check_gradient(Vec& x, const Vec& grad, const std::function<double()>& loss, size_t max_probes = 150) {
  REQUIRE(x.size() == grad.size());
  REQUIRE(std::any_of(grad.begin(), grad.end(), [](double g) { return g != 0.0; }));
  const double eps = 1e-6;
  const size_t step = std::max<size_t>(1, x.size() / max_probes);
  double worst = 0, worst_fd = 0;
  size_t worst_at = 0;
  for (size_t i = step / 2; i < x.size(); i += step) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double up = loss();
    x[i] = saved - eps;
    const double down = loss();
    x[i] = saved;
    const double fd = (up - down) / (2 * eps);
    const double err = std::abs(fd - grad[i]) / (1.0 + std::abs(grad[i]));
    if (!(err <= worst)) {
      worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
      worst_at = i;
      worst_fd = fd;
    }
  }
  INFO("coordinate " << worst_at << ": analytic " << grad[worst_at] << ", finite difference " << worst_fd);
  REQUIRE(worst <= 1e-6);
}

// Runs fn with OpenMP limited to `threads`, restoring the previous limit.
template <typename Fn>
void with_threads(int threads, Fn&& fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  fn();
  omp_set_num_threads(saved);
}

// ------------------------------------------------------------------------------------------------ attention

struct AttnShape {
  int64_t BH, Nq, Nk, D, Dv;
};

void attention_reference(const AttnShape& s, double scale, const Vec& q, const Vec& k, const Vec& v, Vec& out,
                         Vec& lse) {
  out.assign(s.BH * s.Nq * s.Dv, 0.0);
  lse.assign(s.BH * s.Nq, -std::numeric_limits<double>::infinity());
  Vec scores(s.Nk);
  for (int64_t b = 0; b < s.BH; ++b)
    for (int64_t i = 0; i < s.Nq; ++i) {
      if (s.Nk == 0) continue;
      double max_score = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < s.Nk; ++j) {
        double dotp = 0;
        for (int64_t c = 0; c < s.D; ++c) dotp += q[(b * s.Nq + i) * s.D + c] * k[(b * s.Nk + j) * s.D + c];
        scores[j] = scale * dotp;
        max_score = std::max(max_score, scores[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < s.Nk; ++j) sum += std::exp(scores[j] - max_score);
      const double row_lse = max_score + std::log(sum);
      lse[b * s.Nq + i] = row_lse;
      for (int64_t j = 0; j < s.Nk; ++j) {
        const double p = std::exp(scores[j] - row_lse);
        for (int64_t c = 0; c < s.Dv; ++c) out[(b * s.Nq + i) * s.Dv + c] += p * v[(b * s.Nk + j) * s.Dv + c];
      }
    }
}

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
    cpu::attention_forward<double>(s.BH, s.Nq, s.Nk, s.D, s.Dv, scale, q.data(), k.data(), v.data(), out.data(),
                                   lse.data());
  }
};

TEST_CASE("attention forward matches the naive softmax(scale·QKᵀ)·V", "[kernels][cpu][attention]") {
  // Sizes straddle the 64-wide query and key blocks; Nq != Nk and D != Dv.
  for (AttnShape shape : {AttnShape{3, 70, 131, 5, 3}, AttnShape{2, 1, 65, 4, 7}, AttnShape{2, 129, 64, 8, 8},
                          AttnShape{1, 64, 200, 16, 12}, AttnShape{2, 3, 1, 2, 2}}) {
    INFO("BH " << shape.BH << " Nq " << shape.Nq << " Nk " << shape.Nk << " D " << shape.D << " Dv " << shape.Dv);
    const AttnData data(shape, 11);
    Vec out, lse, want_out, want_lse;
    data.forward(out, lse);
    attention_reference(shape, data.scale, data.q, data.k, data.v, want_out, want_lse);
    require_close(out, want_out, 1e-12);
    require_close(lse, want_lse, 1e-12);
  }
}

TEST_CASE("attention with no keys gives zero output and lse = -inf", "[kernels][cpu][attention]") {
  const AttnData data({2, 5, 0, 3, 2}, 5);
  Vec out(data.s.BH * data.s.Nq * data.s.Dv, 7.0), lse(data.s.BH * data.s.Nq, 7.0);
  cpu::attention_forward<double>(2, 5, 0, 3, 2, data.scale, data.q.data(), data.k.data(), data.v.data(),
                                 out.data(), lse.data());
  for (double o : out) REQUIRE(o == 0.0);
  for (double l : lse) REQUIRE((std::isinf(l) && l < 0));

  const Vec grad_out = random_vec(out.size(), 6);
  Vec grad_q(data.q.size(), 7.0), grad_k, grad_v;
  cpu::attention_backward<double>(2, 5, 0, 3, 2, data.scale, data.q.data(), data.k.data(), data.v.data(),
                                  out.data(), lse.data(), grad_out.data(), nullptr, grad_q.data(), grad_k.data(),
                                  grad_v.data());
  for (double g : grad_q) REQUIRE(g == 0.0);
}

TEST_CASE("attention backward matches finite differences, with and without grad_lse", "[kernels][cpu][attention]") {
  for (AttnShape shape : {AttnShape{3, 70, 131, 5, 3}, AttnShape{2, 1, 65, 4, 7}}) {
    for (bool with_lse : {false, true}) {
      INFO("Nq " << shape.Nq << " Nk " << shape.Nk << (with_lse ? " with grad_lse" : " without grad_lse"));
      AttnData data(shape, 21);
      const Vec grad_out = random_vec(shape.BH * shape.Nq * shape.Dv, 31);
      const Vec grad_lse = random_vec(shape.BH * shape.Nq, 32);
      Vec out, lse;
      data.forward(out, lse);
      Vec gq(data.q.size()), gk(data.k.size()), gv(data.v.size());
      cpu::attention_backward<double>(shape.BH, shape.Nq, shape.Nk, shape.D, shape.Dv, data.scale, data.q.data(),
                                      data.k.data(), data.v.data(), out.data(), lse.data(), grad_out.data(),
                                      with_lse ? grad_lse.data() : nullptr, gq.data(), gk.data(), gv.data());
      auto loss = [&] {
        Vec o, l;
        data.forward(o, l);
        return dot(o, grad_out) + (with_lse ? dot(l, grad_lse) : 0.0);
      };
      check_gradient(data.q, gq, loss);
      check_gradient(data.k, gk, loss);
      check_gradient(data.v, gv, loss);
    }
  }
}

// ------------------------------------------------------------------------------------------------ convolution

Vec conv_reference(const cpu::ConvGeometry& g, const Vec& x, const Vec& w, const Vec* bias) {
  const int64_t in_vol = prod(g.in, 3), out_vol = prod(g.out, 3), taps = prod(g.kernel, 3);
  Vec y(g.batch * g.c_out * out_vol);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t co = 0; co < g.c_out; ++co)
      for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
            double acc = bias ? (*bias)[co] : 0.0;
            for (int64_t ci = 0; ci < g.c_in; ++ci)
              for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0)
                for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1)
                  for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
                    const int64_t i0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dilation[0];
                    const int64_t i1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dilation[1];
                    const int64_t i2 = o2 * g.stride[2] - g.pad[2] + k2 * g.dilation[2];
                    if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
                    acc += x[(b * g.c_in + ci) * in_vol + (i0 * g.in[1] + i1) * g.in[2] + i2] *
                           w[(co * g.c_in + ci) * taps + (k0 * g.kernel[1] + k1) * g.kernel[2] + k2];
                  }
            y[(b * g.c_out + co) * out_vol + (o0 * g.out[1] + o1) * g.out[2] + o2] = acc;
          }
  return y;
}

struct ConvCase {
  int nd;
  int64_t batch, c_in, c_out;
  std::vector<int64_t> in, kernel, stride, pad, dilation;
  cpu::ConvGeometry geometry() const {
    return cpu::make_conv_geometry(nd, batch, c_in, c_out, in.data(), kernel.data(), stride.data(), pad.data(),
                                   dilation.data());
  }
};

const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {1, 2, 3, 4, {11}, {3}, {2}, {1}, {2}},
      {2, 2, 2, 3, {7, 6}, {3, 2}, {2, 1}, {1, 0}, {1, 2}},
      {3, 1, 2, 2, {5, 4, 6}, {2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {2, 1, 1}},
      {2, 2, 3, 2, {4, 5}, {1, 1}, {1, 1}, {0, 0}, {1, 1}},  // pointwise: the input is its own im2col matrix
  };
  return cases;
}

TEST_CASE("conv_output_size and make_conv_geometry follow PyTorch's formula", "[kernels][cpu][conv]") {
  REQUIRE(cpu::conv_output_size(11, 3, 2, 1, 2) == 5);
  REQUIRE(cpu::conv_output_size(7, 3, 1, 0, 1) == 5);
  REQUIRE(cpu::conv_output_size(8, 2, 2, 0, 1) == 4);
  REQUIRE(cpu::conv_output_size(2, 5, 1, 0, 1) == 0);
  const cpu::ConvGeometry g = conv_cases()[1].geometry();
  REQUIRE(g.out[0] == 4);
  REQUIRE(g.out[1] == 4);
  REQUIRE((g.in[2] == 1 && g.out[2] == 1 && g.kernel[2] == 1 && g.stride[2] == 1 && g.pad[2] == 0 &&
           g.dilation[2] == 1));
}

TEST_CASE("conv forward matches a direct convolution in 1, 2 and 3 d", "[kernels][cpu][conv]") {
  for (const ConvCase& c : conv_cases()) {
    INFO("nd " << c.nd);
    const cpu::ConvGeometry g = c.geometry();
    const Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 1);
    const Vec w = random_vec(g.c_out * g.c_in * prod(g.kernel, 3), 2);
    const Vec bias = random_vec(g.c_out, 3);
    Vec y(g.batch * g.c_out * prod(g.out, 3));
    cpu::conv_forward<double>(g, x.data(), w.data(), bias.data(), y.data());
    require_close(y, conv_reference(g, x, w, &bias), 1e-12);
    cpu::conv_forward<double>(g, x.data(), w.data(), nullptr, y.data());
    require_close(y, conv_reference(g, x, w, nullptr), 1e-12);
  }
}

TEST_CASE("conv backward matches finite differences in 1, 2 and 3 d", "[kernels][cpu][conv]") {
  for (const ConvCase& c : conv_cases()) {
    INFO("nd " << c.nd);
    const cpu::ConvGeometry g = c.geometry();
    Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 4);
    Vec w = random_vec(g.c_out * g.c_in * prod(g.kernel, 3), 5);
    Vec bias = random_vec(g.c_out, 6);
    const Vec gy = random_vec(g.batch * g.c_out * prod(g.out, 3), 7);
    // gx is overwritten (the 9s must go); the parameter grads accumulate, so they start at zero.
    Vec gx(x.size(), 9.0), gw(w.size(), 0.0), gbias(bias.size(), 0.0);
    cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), gx.data(), gw.data(), gbias.data());
    auto loss = [&] {
      Vec y(gy.size());
      cpu::conv_forward<double>(g, x.data(), w.data(), bias.data(), y.data());
      return dot(y, gy);
    };
    check_gradient(x, gx, loss);
    check_gradient(w, gw, loss);
    check_gradient(bias, gbias, loss);

    // Requesting only some grads gives the same values.
    Vec gx_only(x.size(), 9.0), gw_only(w.size(), 0.0);
    cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), gx_only.data(), nullptr, nullptr);
    cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), nullptr, gw_only.data(), nullptr);
    require_close(gx_only, gx, 0.0);
    require_close(gw_only, gw, 0.0);

    // The parameter grads accumulate: a second call onto them adds the same grads again.
    Vec gw_twice = gw, gbias_twice = gbias, twice_w(gw.size()), twice_b(gbias.size());
    cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), nullptr, gw_twice.data(), gbias_twice.data());
    for (size_t i = 0; i < gw.size(); ++i) twice_w[i] = 2 * gw[i];
    for (size_t i = 0; i < gbias.size(); ++i) twice_b[i] = 2 * gbias[i];
    require_close(gw_twice, twice_w, 1e-12);
    require_close(gbias_twice, twice_b, 1e-12);
  }
}

TEST_CASE("conv over several im2col chunks matches the direct loops, forward and adjoint", "[kernels][cpu][conv]") {
  // Cin·taps = 432 rows × 4096 output positions exceeds the im2col scratch budget, so columns go in chunks.
  const ConvCase c{3, 2, 16, 3, {16, 16, 16}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  const cpu::ConvGeometry g = c.geometry();
  const Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 8);
  const Vec w = random_vec(g.c_out * g.c_in * prod(g.kernel, 3), 9);
  const Vec gy = random_vec(g.batch * g.c_out * prod(g.out, 3), 10);
  Vec y(gy.size());
  cpu::conv_forward<double>(g, x.data(), w.data(), nullptr, y.data());
  require_close(y, conv_reference(g, x, w, nullptr), 1e-12);

  // The adjoint identity <conv(x, w), gy> = <x, gx> = <w, gw> checks both grads against the forward.
  Vec gx(x.size()), gw(w.size());
  cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), gx.data(), gw.data(), nullptr);
  const double reference = dot(y, gy);
  REQUIRE(dot(x, gx) == Approx(reference).epsilon(1e-12));
  REQUIRE(dot(w, gw) == Approx(reference).epsilon(1e-12));
  // And entry by entry for a few input voxels: gx[i] = <conv(e_i, w), gy>, e_i the i-th unit input.
  for (size_t i : {size_t(0), size_t(12345), x.size() - 1}) {
    Vec e(x.size(), 0.0);
    e[i] = 1.0;
    Vec ye(y.size());
    cpu::conv_forward<double>(g, e.data(), w.data(), nullptr, ye.data());
    REQUIRE(gx[i] == Approx(dot(ye, gy)).epsilon(1e-12));
  }
}

// ------------------------------------------------------------------------------------------------ patch transpose

cpu::ConvGeometry patch_geometry(int nd, int64_t batch, int64_t c_in, int64_t c_out, std::vector<int64_t> in,
                                 std::vector<int64_t> patch) {
  cpu::ConvGeometry g{nd, batch, c_in, c_out, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}};
  for (int d = 0; d < nd; ++d) {
    g.in[d] = in[d];
    g.kernel[d] = g.stride[d] = patch[d];
    g.out[d] = in[d] * patch[d];
  }
  return g;
}

Vec patch_reference(const cpu::ConvGeometry& g, const Vec& x, const Vec& w, const Vec* bias) {
  const int64_t in_vol = prod(g.in, 3), taps = prod(g.kernel, 3), out_vol = in_vol * taps;
  Vec y(g.batch * g.c_out * out_vol);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t co = 0; co < g.c_out; ++co)
      for (int64_t y0 = 0; y0 < g.out[0]; ++y0)
        for (int64_t y1 = 0; y1 < g.out[1]; ++y1)
          for (int64_t y2 = 0; y2 < g.out[2]; ++y2) {
            const int64_t i0 = y0 / g.kernel[0], i1 = y1 / g.kernel[1], i2 = y2 / g.kernel[2];
            const int64_t a0 = y0 % g.kernel[0], a1 = y1 % g.kernel[1], a2 = y2 % g.kernel[2];
            double acc = bias ? (*bias)[co] : 0.0;
            for (int64_t ci = 0; ci < g.c_in; ++ci)
              acc += x[(b * g.c_in + ci) * in_vol + (i0 * g.in[1] + i1) * g.in[2] + i2] *
                     w[(ci * g.c_out + co) * taps + (a0 * g.kernel[1] + a1) * g.kernel[2] + a2];
            y[(b * g.c_out + co) * out_vol + (y0 * g.out[1] + y1) * g.out[2] + y2] = acc;
          }
  return y;
}

TEST_CASE("transposed patch conv matches direct loops and finite differences", "[kernels][cpu][conv]") {
  const std::vector<cpu::ConvGeometry> cases = {
      patch_geometry(1, 2, 3, 2, {5}, {4}),
      patch_geometry(2, 2, 2, 3, {3, 4}, {2, 3}),
      patch_geometry(3, 1, 3, 2, {2, 3, 2}, {2, 2, 3}),
      // Cout·taps = 256 rows × 4352 voxels spans two GEMM chunks.
      patch_geometry(3, 1, 2, 4, {17, 16, 16}, {4, 4, 4}),
  };
  for (size_t n = 0; n < cases.size(); ++n) {
    const cpu::ConvGeometry& g = cases[n];
    const bool large = n == cases.size() - 1;
    INFO("case " << n);
    Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 40 + n);
    Vec w = random_vec(g.c_in * g.c_out * prod(g.kernel, 3), 50 + n);
    Vec bias = random_vec(g.c_out, 60 + n);
    const Vec gy = random_vec(g.batch * g.c_out * prod(g.out, 3), 70 + n);
    Vec y(gy.size());
    cpu::conv_transpose_patch_forward<double>(g, x.data(), w.data(), bias.data(), y.data());
    require_close(y, patch_reference(g, x, w, &bias), 1e-12);

    Vec gx(x.size(), 9.0), gw(w.size(), 0.0), gbias(bias.size(), 0.0);
    cpu::conv_transpose_patch_backward<double>(g, x.data(), w.data(), gy.data(), gx.data(), gw.data(),
                                               gbias.data());
    auto loss = [&] {
      Vec out(gy.size());
      cpu::conv_transpose_patch_forward<double>(g, x.data(), w.data(), bias.data(), out.data());
      return dot(out, gy);
    };
    check_gradient(x, gx, loss, large ? 6 : 150);
    check_gradient(w, gw, loss, large ? 6 : 150);
    check_gradient(bias, gbias, loss);
  }
}

// ------------------------------------------------------------------------------------------------ pooling

void pool_reference(const cpu::ConvGeometry& g, const Vec& x, Vec& avg, Vec& max, std::vector<int64_t>& argmax) {
  const int64_t in_vol = prod(g.in, 3), out_vol = prod(g.out, 3);
  const double taps = double(prod(g.kernel, 3));
  avg.assign(g.batch * g.c_in * out_vol, 0.0);
  max.assign(avg.size(), -std::numeric_limits<double>::infinity());
  argmax.assign(avg.size(), -1);
  for (int64_t plane = 0; plane < g.batch * g.c_in; ++plane)
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          const int64_t out_at = plane * out_vol + (o0 * g.out[1] + o1) * g.out[2] + o2;
          for (int64_t k0 = 0; k0 < g.kernel[0]; ++k0)
            for (int64_t k1 = 0; k1 < g.kernel[1]; ++k1)
              for (int64_t k2 = 0; k2 < g.kernel[2]; ++k2) {
                const int64_t i0 = o0 * g.stride[0] - g.pad[0] + k0 * g.dilation[0];
                const int64_t i1 = o1 * g.stride[1] - g.pad[1] + k1 * g.dilation[1];
                const int64_t i2 = o2 * g.stride[2] - g.pad[2] + k2 * g.dilation[2];
                if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
                const int64_t src = (i0 * g.in[1] + i1) * g.in[2] + i2;
                const double v = x[plane * in_vol + src];
                avg[out_at] += v / taps;
                if (v > max[out_at]) {
                  max[out_at] = v;
                  argmax[out_at] = src;
                }
              }
        }
}

TEST_CASE("avg and max pooling match direct loops and finite differences", "[kernels][cpu][pool]") {
  const std::vector<ConvCase> cases = {
      {1, 2, 3, 3, {9}, {3}, {2}, {1}, {1}},
      {2, 2, 2, 2, {7, 6}, {3, 2}, {2, 2}, {1, 1}, {1, 1}},
      {3, 1, 2, 2, {5, 6, 4}, {2, 3, 2}, {2, 1, 2}, {1, 1, 0}, {1, 1, 1}},
      {2, 1, 2, 2, {8, 7}, {3, 2}, {1, 2}, {1, 0}, {2, 3}},  // dilated (max pooling's dilation)
  };
  for (const ConvCase& c : cases) {
    INFO("nd " << c.nd << ", dilation " << c.dilation[0]);
    const cpu::ConvGeometry g = c.geometry();
    Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 80);
    const Vec gy = random_vec(g.batch * g.c_in * prod(g.out, 3), 81);
    Vec want_avg, want_max;
    std::vector<int64_t> want_argmax;
    pool_reference(g, x, want_avg, want_max, want_argmax);

    Vec avg(gy.size()), max(gy.size());
    std::vector<int64_t> argmax(gy.size());
    cpu::avg_pool_forward<double>(g, x.data(), avg.data());
    cpu::max_pool_forward<double>(g, x.data(), max.data(), argmax.data());
    require_close(avg, want_avg, 1e-14);
    require_close(max, want_max, 0.0);
    REQUIRE(argmax == want_argmax);

    Vec gx_avg(x.size(), 9.0), gx_max(x.size(), 9.0);
    cpu::avg_pool_backward<double>(g, gy.data(), gx_avg.data());
    cpu::max_pool_backward<double>(g, gy.data(), argmax.data(), gx_max.data());
    check_gradient(x, gx_avg, [&] {
      Vec y(gy.size());
      cpu::avg_pool_forward<double>(g, x.data(), y.data());
      return dot(y, gy);
    });
    check_gradient(x, gx_max, [&] {
      Vec y(gy.size());
      std::vector<int64_t> idx(gy.size());
      cpu::max_pool_forward<double>(g, x.data(), y.data(), idx.data());
      return dot(y, gy);
    });
  }
}

TEST_CASE("pooling padding: zeros in the average, -inf in the max", "[kernels][cpu][pool]") {
  const int64_t in[1] = {5}, k[1] = {3}, s[1] = {2}, p[1] = {1}, d[1] = {1};
  const cpu::ConvGeometry g = cpu::make_conv_geometry(1, 1, 1, 1, in, k, s, p, d);
  const Vec x = {1, 2, 3, 4, 5};
  Vec avg(3);
  cpu::avg_pool_forward<double>(g, x.data(), avg.data());
  require_close(avg, {1, 3, 3}, 1e-15);  // torch.nn.AvgPool1d(3, 2, 1)

  const int64_t in2[1] = {3}, k2[1] = {2}, s2[1] = {1};
  const cpu::ConvGeometry g2 = cpu::make_conv_geometry(1, 1, 1, 1, in2, k2, s2, p, d);
  const Vec negative = {-1, -2, -3};
  Vec max(4);
  std::vector<int64_t> argmax(4);
  cpu::max_pool_forward<double>(g2, negative.data(), max.data(), argmax.data());
  require_close(max, {-1, -1, -2, -3}, 0.0);
  REQUIRE(argmax == std::vector<int64_t>{0, 0, 1, 2});
}

// ------------------------------------------------------------------------------------------------ upsample

// PyTorch's source coordinate for a linear mode, straight from its definition.
double linear_source(bool align_corners, int64_t in, int64_t out, int64_t dst) {
  if (align_corners) return out > 1 ? double(dst) * double(in - 1) / double(out - 1) : 0.0;
  const double src = (double(dst) + 0.5) * double(in) / double(out) - 0.5;
  return src < 0 ? 0.0 : src;
}

Vec upsample_reference(cpu::UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                       const int64_t* out, const Vec& x) {
  const int64_t in_vol = prod(in, nd), out_vol = prod(out, nd);
  Vec y(planes * out_vol, 0.0);
  for (int64_t plane = 0; plane < planes; ++plane)
    for (int64_t p = 0; p < out_vol; ++p) {
      int64_t lo[3], hi[3];
      double frac[3];
      for (int d = 0; d < nd; ++d) {
        int64_t stride_after = 1;
        for (int e = d + 1; e < nd; ++e) stride_after *= out[e];
        const int64_t dst = (p / stride_after) % out[d];
        if (mode == cpu::UpsampleMode::nearest) {
          lo[d] = hi[d] = std::min<int64_t>(int64_t(std::floor(double(dst) * double(in[d]) / double(out[d]))),
                                            in[d] - 1);
          frac[d] = 0.0;
        } else {
          const double src = linear_source(align_corners, in[d], out[d], dst);
          lo[d] = int64_t(std::floor(src));
          hi[d] = std::min(lo[d] + 1, in[d] - 1);
          frac[d] = src - double(lo[d]);
        }
      }
      double acc = 0;
      for (int corner = 0; corner < (1 << nd); ++corner) {
        double weight = 1;
        int64_t src = 0;
        for (int d = 0; d < nd; ++d) {
          const bool upper = (corner >> d) & 1;
          weight *= upper ? frac[d] : 1.0 - frac[d];
          src = src * in[d] + (upper ? hi[d] : lo[d]);
        }
        acc += weight * x[plane * in_vol + src];
      }
      y[plane * out_vol + p] = acc;
    }
  return y;
}

TEST_CASE("upsample matches PyTorch's interpolate values", "[kernels][cpu][upsample]") {
  const Vec x = {1, 2, 3, 4};
  const int64_t in[1] = {4};
  auto run = [&](cpu::UpsampleMode mode, bool align, int64_t out_size) {
    const int64_t out[1] = {out_size};
    Vec y(out_size);
    cpu::upsample_forward<double>(mode, align, 1, 1, in, out, x.data(), y.data());
    return y;
  };
  // F.interpolate(torch.tensor([[[1., 2, 3, 4]]]), size=..., mode=..., align_corners=...)
  require_close(run(cpu::UpsampleMode::linear, false, 8), {1.0, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4.0}, 1e-15);
  require_close(run(cpu::UpsampleMode::linear, true, 7), {1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0}, 1e-15);
  require_close(run(cpu::UpsampleMode::linear, false, 3), {7.0 / 6.0, 2.5, 23.0 / 6.0}, 1e-15);
  require_close(run(cpu::UpsampleMode::nearest, false, 6), {1, 1, 2, 3, 3, 4}, 0.0);
  require_close(run(cpu::UpsampleMode::nearest, false, 3), {1, 2, 3}, 0.0);
}

TEST_CASE("upsample matches the reference formulas and finite differences", "[kernels][cpu][upsample]") {
  struct Case {
    int nd;
    std::vector<int64_t> in, out;
  };
  const std::vector<Case> cases = {{1, {5}, {12}}, {1, {7}, {3}}, {2, {3, 4}, {7, 5}}, {3, {2, 3, 4}, {5, 4, 7}},
                                   {2, {1, 3}, {4, 1}}};
  const int64_t planes = 3;
  for (const Case& c : cases)
    for (cpu::UpsampleMode mode : {cpu::UpsampleMode::nearest, cpu::UpsampleMode::linear})
      for (bool align : {false, true}) {
        if (mode == cpu::UpsampleMode::nearest && align) continue;
        INFO("nd " << c.nd << " in " << c.in[0] << " out " << c.out[0]
                   << (mode == cpu::UpsampleMode::nearest ? " nearest" : " linear") << " align " << align);
        Vec x = random_vec(planes * prod(c.in.data(), c.nd), 90);
        const Vec gy = random_vec(planes * prod(c.out.data(), c.nd), 91);
        Vec y(gy.size());
        cpu::upsample_forward<double>(mode, align, c.nd, planes, c.in.data(), c.out.data(), x.data(), y.data());
        require_close(y, upsample_reference(mode, align, c.nd, planes, c.in.data(), c.out.data(), x), 1e-14);

        Vec gx(x.size(), 9.0);
        cpu::upsample_backward<double>(mode, align, c.nd, planes, c.in.data(), c.out.data(), gy.data(), gx.data());
        check_gradient(x, gx, [&] {
          Vec out(gy.size());
          cpu::upsample_forward<double>(mode, align, c.nd, planes, c.in.data(), c.out.data(), x.data(),
                                        out.data());
          return dot(out, gy);
        });
      }
}

// ------------------------------------------------------------------------------------------------ indexing

TEST_CASE("index_select and index_add (its adjoint) with repeated indices", "[kernels][cpu][index]") {
  const int64_t outer = 3, n_src = 5, inner = 4, n_idx = 6;
  const std::vector<int64_t> idx = {4, 0, 2, 4, 4, 1};
  Vec src = random_vec(outer * n_src * inner, 100);
  Vec out(outer * n_idx * inner);
  cpu::index_select<double>(outer, n_src, inner, src.data(), n_idx, idx.data(), out.data());
  Vec want(out.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n_idx; ++j)
      for (int64_t i = 0; i < inner; ++i) want[(o * n_idx + j) * inner + i] = src[(o * n_src + idx[j]) * inner + i];
  require_close(out, want, 0.0);

  const Vec g = random_vec(out.size(), 101);
  Vec grad(src.size(), 0.0);
  cpu::index_add<double>(outer, n_src, inner, grad.data(), n_idx, idx.data(), g.data());
  check_gradient(src, grad, [&] {
    Vec y(g.size());
    cpu::index_select<double>(outer, n_src, inner, src.data(), n_idx, idx.data(), y.data());
    return dot(y, g);
  });
  // index_add accumulates on top of what dst holds; row 3 is never indexed.
  Vec acc(src.size(), 1.0);
  cpu::index_add<double>(outer, n_src, inner, acc.data(), n_idx, idx.data(), g.data());
  for (size_t e = 0; e < acc.size(); ++e) REQUIRE(acc[e] == Approx(grad[e] + 1.0).epsilon(1e-15));
  REQUIRE(acc[3 * inner] == 1.0);
}

TEST_CASE("gather and scatter_add (its adjoint) along the middle dim", "[kernels][cpu][index]") {
  const int64_t outer = 2, n_src = 4, inner = 3, n_idx = 5;
  std::vector<int64_t> idx(outer * n_idx * inner);
  std::mt19937_64 gen(7);
  for (int64_t& e : idx) e = int64_t(gen() % n_src);
  Vec src = random_vec(outer * n_src * inner, 110);
  Vec out(idx.size());
  cpu::gather<double>(outer, n_src, inner, src.data(), n_idx, idx.data(), out.data());
  Vec want(out.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n_idx; ++j)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (o * n_idx + j) * inner + i;
        want[at] = src[(o * n_src + idx[at]) * inner + i];
      }
  require_close(out, want, 0.0);

  const Vec g = random_vec(out.size(), 111);
  Vec grad(src.size(), 0.0);
  cpu::scatter_add<double>(outer, n_src, inner, grad.data(), n_idx, idx.data(), g.data());
  check_gradient(src, grad, [&] {
    Vec y(g.size());
    cpu::gather<double>(outer, n_src, inner, src.data(), n_idx, idx.data(), y.data());
    return dot(y, g);
  });
}

// ------------------------------------------------------------------------------------------------ shape ops

TEST_CASE("cat and split along the middle dim are inverse copies", "[kernels][cpu][shape]") {
  const int64_t outer = 3, inner = 2;
  const std::vector<int64_t> part_n = {2, 0, 3, 1};
  std::vector<Vec> parts;
  for (size_t p = 0; p < part_n.size(); ++p) parts.push_back(random_vec(outer * part_n[p] * inner, 120 + p));
  std::vector<const double*> part_ptrs;
  for (const Vec& p : parts) part_ptrs.push_back(p.data());
  const int64_t total = 6;
  Vec out(outer * total * inner);
  cpu::cat<double>(outer, inner, int64_t(parts.size()), part_ptrs.data(), part_n.data(), out.data());
  Vec want;
  for (int64_t o = 0; o < outer; ++o)
    for (size_t p = 0; p < parts.size(); ++p)
      want.insert(want.end(), parts[p].begin() + o * part_n[p] * inner, parts[p].begin() + (o + 1) * part_n[p] * inner);
  require_close(out, want, 0.0);

  std::vector<Vec> back;
  std::vector<double*> back_ptrs;
  for (int64_t n : part_n) back.emplace_back(outer * n * inner, 9.0);
  for (Vec& b : back) back_ptrs.push_back(b.data());
  cpu::split<double>(outer, inner, int64_t(parts.size()), out.data(), part_n.data(), back_ptrs.data());
  for (size_t p = 0; p < parts.size(); ++p) require_close(back[p], parts[p], 0.0);

  Vec block(2 * 3, 0.0);
  const Vec grid = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // 3 × 4
  cpu::copy_block<double>(2, 3, grid.data() + 5, 4, block.data(), 3);
  require_close(block, {5, 6, 7, 9, 10, 11}, 0.0);
}

// Where padded coordinate s reads from, by repeated mirroring / wrapping (a different route from the kernel's).
int64_t reference_pad_source(cpu::PadMode mode, int64_t s, int64_t n) {
  switch (mode) {
    case cpu::PadMode::constant:
      return s >= 0 && s < n ? s : -1;
    case cpu::PadMode::replicate:
      return s < 0 ? 0 : (s >= n ? n - 1 : s);
    case cpu::PadMode::circular:
      while (s < 0) s += n;
      return s % n;
    case cpu::PadMode::reflect:
      while (s < 0 || s >= n) s = s < 0 ? -s : 2 * (n - 1) - s;
      return s;
  }
  return -1;
}

Vec pad_reference(cpu::PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* lo,
                  const int64_t* hi, double value, const Vec& x) {
  int64_t out[3];
  for (int d = 0; d < nd; ++d) out[d] = in[d] + lo[d] + hi[d];
  const int64_t in_vol = prod(in, nd), out_vol = prod(out, nd);
  Vec y(outer * out_vol);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < out_vol; ++p) {
      int64_t src = 0, rest = p, stride = out_vol;
      bool fill = false;
      for (int d = 0; d < nd; ++d) {
        stride /= out[d];
        const int64_t s = reference_pad_source(mode, rest / stride - lo[d], in[d]);
        rest %= stride;
        fill = fill || s < 0;
        src = src * in[d] + std::max<int64_t>(s, 0);
      }
      y[o * out_vol + p] = fill ? value : x[o * in_vol + src];
    }
  return y;
}

TEST_CASE("pad matches PyTorch's F.pad values", "[kernels][cpu][shape]") {
  const Vec x = {1, 2, 3, 4};
  const int64_t in[1] = {4};
  auto run = [&](cpu::PadMode mode, int64_t lo, int64_t hi) {
    Vec y(4 + lo + hi);
    cpu::pad<double>(mode, 1, 1, in, &lo, &hi, 9.0, x.data(), y.data());
    return y;
  };
  require_close(run(cpu::PadMode::reflect, 2, 2), {3, 2, 1, 2, 3, 4, 3, 2}, 0.0);
  require_close(run(cpu::PadMode::replicate, 2, 1), {1, 1, 1, 2, 3, 4, 4}, 0.0);
  require_close(run(cpu::PadMode::circular, 2, 1), {3, 4, 1, 2, 3, 4, 1}, 0.0);
  require_close(run(cpu::PadMode::constant, 1, -2), {9, 1, 2}, 0.0);
  require_close(run(cpu::PadMode::constant, -1, -1), {2, 3}, 0.0);
}

TEST_CASE("pad and pad_backward in 1, 2 and 3 d for every mode", "[kernels][cpu][shape]") {
  struct Case {
    int nd;
    std::vector<int64_t> in, lo, hi;
  };
  const std::vector<Case> cases = {
      {1, {5}, {2}, {3}}, {2, {4, 5}, {1, 3}, {2, 0}}, {3, {3, 4, 3}, {1, 0, 2}, {2, 1, 1}}};
  const Case crop{2, {5, 6}, {-1, 2}, {1, -3}};
  const int64_t outer = 2;
  for (cpu::PadMode mode : {cpu::PadMode::constant, cpu::PadMode::reflect, cpu::PadMode::replicate,
                            cpu::PadMode::circular}) {
    std::vector<Case> all = cases;
    all.push_back(crop);
    for (const Case& c : all) {
      INFO("mode " << int(mode) << " nd " << c.nd << " lo " << c.lo[0]);
      std::vector<int64_t> out(c.nd);
      for (int d = 0; d < c.nd; ++d) out[d] = c.in[d] + c.lo[d] + c.hi[d];
      Vec x = random_vec(outer * prod(c.in.data(), c.nd), 130);
      const Vec gy = random_vec(outer * prod(out.data(), c.nd), 131);
      Vec y(gy.size());
      cpu::pad<double>(mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), -5.0, x.data(), y.data());
      require_close(y, pad_reference(mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), -5.0, x), 0.0);

      Vec gx(x.size(), 9.0);
      cpu::pad_backward<double>(mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), gy.data(), gx.data());
      check_gradient(x, gx, [&] {
        Vec out_y(gy.size());
        cpu::pad<double>(mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), -5.0, x.data(), out_y.data());
        return dot(out_y, gy);
      });
    }
  }
}

// ------------------------------------------------------------------------------------------------ float, threads

TEST_CASE("float instantiations agree with the double kernels", "[kernels][cpu][float]") {
  const double tol = 2e-5;
  {
    const AttnData data({2, 70, 131, 6, 5}, 140);
    Vec out, lse;
    data.forward(out, lse);
    const Vec grad_out = random_vec(out.size(), 141), grad_lse = random_vec(lse.size(), 142);
    Vec gq(data.q.size()), gk(data.k.size()), gv(data.v.size());
    cpu::attention_backward<double>(2, 70, 131, 6, 5, data.scale, data.q.data(), data.k.data(), data.v.data(),
                                    out.data(), lse.data(), grad_out.data(), grad_lse.data(), gq.data(), gk.data(),
                                    gv.data());
    const std::vector<float> q = to_float(data.q), k = to_float(data.k), v = to_float(data.v);
    std::vector<float> fout(out.size()), flse(lse.size());
    cpu::attention_forward<float>(2, 70, 131, 6, 5, float(data.scale), q.data(), k.data(), v.data(), fout.data(),
                                  flse.data());
    require_close(fout, out, tol);
    require_close(flse, lse, tol);
    const std::vector<float> fgo = to_float(grad_out), fgl = to_float(grad_lse);
    std::vector<float> fgq(gq.size()), fgk(gk.size()), fgv(gv.size());
    cpu::attention_backward<float>(2, 70, 131, 6, 5, float(data.scale), q.data(), k.data(), v.data(), fout.data(),
                                   flse.data(), fgo.data(), fgl.data(), fgq.data(), fgk.data(), fgv.data());
    require_close(fgq, gq, 1e-4);
    require_close(fgk, gk, 1e-4);
    require_close(fgv, gv, 1e-4);
  }
  {
    const cpu::ConvGeometry g = conv_cases()[2].geometry();
    const Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 150);
    const Vec w = random_vec(g.c_out * g.c_in * prod(g.kernel, 3), 151);
    const Vec bias = random_vec(g.c_out, 152), gy = random_vec(g.batch * g.c_out * prod(g.out, 3), 153);
    Vec y(gy.size()), gx(x.size()), gw(w.size()), gb(bias.size());
    cpu::conv_forward<double>(g, x.data(), w.data(), bias.data(), y.data());
    cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), gx.data(), gw.data(), gb.data());
    const std::vector<float> fx = to_float(x), fw = to_float(w), fb = to_float(bias), fgy = to_float(gy);
    std::vector<float> fy(y.size()), fgx(gx.size()), fgw(gw.size()), fgb(gb.size());
    cpu::conv_forward<float>(g, fx.data(), fw.data(), fb.data(), fy.data());
    cpu::conv_backward<float>(g, fx.data(), fw.data(), fgy.data(), fgx.data(), fgw.data(), fgb.data());
    require_close(fy, y, tol);
    require_close(fgx, gx, tol);
    require_close(fgw, gw, tol);
    require_close(fgb, gb, tol);

    const cpu::ConvGeometry pg = patch_geometry(2, 2, 3, 2, {3, 4}, {2, 3});
    const Vec px = random_vec(pg.batch * pg.c_in * prod(pg.in, 3), 154), pw = random_vec(pg.c_in * pg.c_out * 6, 155);
    Vec py(pg.batch * pg.c_out * prod(pg.out, 3));
    cpu::conv_transpose_patch_forward<double>(pg, px.data(), pw.data(), nullptr, py.data());
    const std::vector<float> fpx = to_float(px), fpw = to_float(pw);
    std::vector<float> fpy(py.size()), fpgx(px.size());
    cpu::conv_transpose_patch_forward<float>(pg, fpx.data(), fpw.data(), nullptr, fpy.data());
    require_close(fpy, py, tol);
    Vec pgx(px.size());
    const std::vector<float> fpy_grad = to_float(py);
    cpu::conv_transpose_patch_backward<double>(pg, px.data(), pw.data(), py.data(), pgx.data(), nullptr, nullptr);
    cpu::conv_transpose_patch_backward<float>(pg, fpx.data(), fpw.data(), fpy_grad.data(), fpgx.data(), nullptr,
                                              nullptr);
    require_close(fpgx, pgx, tol);
  }
  {
    const cpu::ConvGeometry g = ConvCase{2, 2, 2, 2, {7, 6}, {3, 2}, {2, 2}, {1, 1}, {1, 1}}.geometry();
    const Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 160);
    const Vec gy = random_vec(g.batch * g.c_in * prod(g.out, 3), 161);
    Vec avg(gy.size()), max(gy.size()), gx(x.size());
    std::vector<int64_t> argmax(gy.size()), fargmax(gy.size());
    cpu::avg_pool_forward<double>(g, x.data(), avg.data());
    cpu::max_pool_forward<double>(g, x.data(), max.data(), argmax.data());
    cpu::avg_pool_backward<double>(g, gy.data(), gx.data());
    const std::vector<float> fx = to_float(x), fgy = to_float(gy);
    std::vector<float> favg(avg.size()), fmax(max.size()), fgx(gx.size()), fgx_max(gx.size());
    cpu::avg_pool_forward<float>(g, fx.data(), favg.data());
    cpu::max_pool_forward<float>(g, fx.data(), fmax.data(), fargmax.data());
    cpu::avg_pool_backward<float>(g, fgy.data(), fgx.data());
    cpu::max_pool_backward<float>(g, fgy.data(), fargmax.data(), fgx_max.data());
    require_close(favg, avg, tol);
    require_close(fmax, max, tol);
    REQUIRE(fargmax == argmax);
    require_close(fgx, gx, tol);
    Vec gx_max(x.size());
    cpu::max_pool_backward<double>(g, gy.data(), argmax.data(), gx_max.data());
    require_close(fgx_max, gx_max, tol);
  }
  {
    const int64_t in[3] = {2, 3, 4}, out[3] = {5, 4, 7};
    const Vec x = random_vec(2 * 24, 170), gy = random_vec(2 * 140, 171);
    Vec y(gy.size()), gx(x.size());
    cpu::upsample_forward<double>(cpu::UpsampleMode::linear, false, 3, 2, in, out, x.data(), y.data());
    cpu::upsample_backward<double>(cpu::UpsampleMode::linear, false, 3, 2, in, out, gy.data(), gx.data());
    const std::vector<float> fx = to_float(x), fgy = to_float(gy);
    std::vector<float> fy(y.size()), fgx(gx.size());
    cpu::upsample_forward<float>(cpu::UpsampleMode::linear, false, 3, 2, in, out, fx.data(), fy.data());
    cpu::upsample_backward<float>(cpu::UpsampleMode::linear, false, 3, 2, in, out, fgy.data(), fgx.data());
    require_close(fy, y, tol);
    require_close(fgx, gx, tol);
  }
  {
    const std::vector<int64_t> idx = {2, 0, 2};
    const std::vector<float> src = {1, 2, 3, 4, 5, 6};  // (1, 3, 2)
    std::vector<float> sel(6), back(6, 0.0f), gat(6), sca(6, 0.0f);
    cpu::index_select<float>(1, 3, 2, src.data(), 3, idx.data(), sel.data());
    require_close(sel, {5, 6, 1, 2, 5, 6}, 0.0);
    cpu::index_add<float>(1, 3, 2, back.data(), 3, idx.data(), sel.data());
    require_close(back, {1, 2, 0, 0, 10, 12}, 0.0);
    const std::vector<int64_t> gidx = {2, 0, 1, 1, 0, 2};
    cpu::gather<float>(1, 3, 2, src.data(), 3, gidx.data(), gat.data());
    require_close(gat, {5, 2, 3, 4, 1, 6}, 0.0);
    cpu::scatter_add<float>(1, 3, 2, sca.data(), 3, gidx.data(), gat.data());
    require_close(sca, {1, 2, 3, 4, 5, 6}, 0.0);

    const float* parts[2] = {src.data(), src.data() + 2};
    const int64_t part_n[2] = {1, 2};
    std::vector<float> joined(6), a(2), b(4);
    cpu::cat<float>(1, 2, 2, parts, part_n, joined.data());
    require_close(joined, {1, 2, 3, 4, 5, 6}, 0.0);
    float* split_parts[2] = {a.data(), b.data()};
    cpu::split<float>(1, 2, 2, joined.data(), part_n, split_parts);
    require_close(b, {3, 4, 5, 6}, 0.0);

    const int64_t in[1] = {6}, lo[1] = {2}, hi[1] = {1};
    std::vector<float> padded(9), gpad(6);
    cpu::pad<float>(cpu::PadMode::reflect, 1, 1, in, lo, hi, 0.0f, src.data(), padded.data());
    require_close(padded, {3, 2, 1, 2, 3, 4, 5, 6, 5}, 0.0);
    cpu::pad_backward<float>(cpu::PadMode::reflect, 1, 1, in, lo, hi, padded.data(), gpad.data());
    require_close(gpad, {1, 4, 6, 4, 10, 6}, 0.0);
  }
}

TEST_CASE("results do not depend on the number of OpenMP threads", "[kernels][cpu][determinism]") {
  const AttnData data({4, 100, 150, 8, 8}, 180);
  Vec out, lse;
  data.forward(out, lse);
  const Vec grad_out = random_vec(out.size(), 181);
  auto attention_grads = [&] {
    Vec grads(data.q.size() + data.k.size() + data.v.size());
    cpu::attention_backward<double>(4, 100, 150, 8, 8, data.scale, data.q.data(), data.k.data(), data.v.data(),
                                    out.data(), lse.data(), grad_out.data(), nullptr, grads.data(),
                                    grads.data() + data.q.size(), grads.data() + data.q.size() + data.k.size());
    return grads;
  };
  // scatter_add with many repeated indices and outer = 1: the case a naive parallel loop would race on.
  const int64_t n_dst = 7, n_idx = 400, inner = 300;
  std::vector<int64_t> idx(n_idx * inner);
  std::mt19937_64 gen(9);
  for (int64_t& e : idx) e = int64_t(gen() % n_dst);
  const Vec src = random_vec(n_idx * inner, 182);
  auto scattered = [&] {
    Vec dst(n_dst * inner, 0.0);
    cpu::scatter_add<double>(1, n_dst, inner, dst.data(), n_idx, idx.data(), src.data());
    return dst;
  };
  Vec grads_serial, grads_parallel, scatter_serial, scatter_parallel;
  with_threads(1, [&] {
    grads_serial = attention_grads();
    scatter_serial = scattered();
  });
  with_threads(2, [&] {
    grads_parallel = attention_grads();
    scatter_parallel = scattered();
  });
  REQUIRE(grads_serial == grads_parallel);
  REQUIRE(scatter_serial == scatter_parallel);
}

}  // namespace
