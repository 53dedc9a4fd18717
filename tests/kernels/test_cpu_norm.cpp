// kernels/cpu/norm: layernorm and groupnorm against the fp64 two-pass reference (also far from zero in float);
// backward kernels against central finite differences.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/norm.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEMPLATE_TEST_CASE("layernorm forward matches the reference", "[kernels][cpu]", float, double) {
  const double eps = 1e-5;
  for (int64_t rows : {1, 3}) {
    for (int64_t D : {1, 7, 33, 130}) {
      for (int affine = 0; affine < 3; ++affine) {  // 0: none, 1: weight only, 2: weight and bias
        INFO("rows=" << rows << " D=" << D << " affine=" << affine);
        const auto x = cast<TestType>(random_vec(rows * D, -2, 3, 600 + D));
        const auto w = cast<TestType>(random_vec(D, 0.5, 1.5, 601));
        const auto b = cast<TestType>(random_vec(D, -1, 1, 602));
        std::vector<TestType> y(x.size()), mean(rows), rstd(rows);
        cpu::layernorm<TestType>(rows, D, x.data(), affine ? w.data() : nullptr, affine == 2 ? b.data() : nullptr,
                                 TestType(eps), y.data(), mean.data(), rstd.data());
        const Vec wd(w.begin(), w.end()), bd(b.begin(), b.end());
        const NormRef ref = ref_norm(Vec(x.begin(), x.end()), rows, D, affine ? &wd : nullptr,
                                     affine == 2 ? &bd : nullptr, eps, [D](int64_t e) { return e % D; });
        expect_close(y, ref.y, tol<TestType>(), tol<TestType>());
        expect_close(mean, ref.mean, tol<TestType>(), tol<TestType>());
        expect_close(rstd, ref.rstd, tol<TestType>());
      }
    }
  }
}

TEST_CASE("float layernorm stays accurate far from zero", "[kernels][cpu]") {
  // x = 1e4 + O(1): E[x^2] - E[x]^2 in float cancels to noise, and a float mean is off by ~5e-4 alone.
  const int64_t rows = 2, D = 130;
  std::vector<float> x(rows * D);
  const Vec noise = random_vec(rows * D, -1, 1, 610);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(1e4 + noise[i]);
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  cpu::layernorm<float>(rows, D, x.data(), nullptr, nullptr, 1e-5f, y.data(), mean.data(), rstd.data());
  const NormRef ref =
      ref_norm(Vec(x.begin(), x.end()), rows, D, nullptr, nullptr, 1e-5, [D](int64_t e) { return e % D; });
  expect_close(rstd, ref.rstd, 1e-6);
  expect_close(y, ref.y, 1e-5, 1e-5);
}

TEST_CASE("layernorm backward matches finite differences", "[kernels][cpu]") {
  const double eps = 1e-5;
  for (int64_t D : {1, 7, 33}) {
    for (bool affine : {true, false}) {
      INFO("D=" << D << " affine=" << affine);
      const int64_t rows = 3;
      const Vec x = random_vec(rows * D, -2, 2, 700 + D);
      const Vec w = random_vec(D, 0.5, 1.5, 701);
      const Vec b = random_vec(D, -1, 1, 702);
      const Vec gy = random_vec(rows * D, -1, 1, 703);
      Vec y(x.size()), mean(rows), rstd(rows);
      const double* wp = affine ? w.data() : nullptr;
      const double* bp = affine ? b.data() : nullptr;
      cpu::layernorm<double>(rows, D, x.data(), wp, bp, eps, y.data(), mean.data(), rstd.data());
      // Parameter grads accumulate onto what is already there.
      Vec gx(x.size()), gw(D, 0.25), gb(D, -0.5);
      cpu::layernorm_backward<double>(rows, D, x.data(), wp, mean.data(), rstd.data(), gy.data(), gx.data(),
                                      affine ? gw.data() : nullptr, affine ? gb.data() : nullptr);
      auto run = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
        Vec out(xv.size()), m(rows), r(rows);
        cpu::layernorm<double>(rows, D, xv.data(), affine ? wv.data() : nullptr, affine ? bv.data() : nullptr, eps,
                               out.data(), m.data(), r.data());
        return out;
      };
      expect_grad(gx, fd_grad(x, gy, [&](const Vec& xv) { return run(xv, w, b); }));
      if (!affine) continue;
      Vec want_w = fd_grad(w, gy, [&](const Vec& wv) { return run(x, wv, b); });
      Vec want_b = fd_grad(b, gy, [&](const Vec& bv) { return run(x, w, bv); });
      for (int64_t j = 0; j < D; ++j) {
        want_w[j] += 0.25;
        want_b[j] -= 0.5;
      }
      expect_grad(gw, want_w);
      expect_grad(gb, want_b);

      // Without gx the parameter grads are the same.
      Vec gw2(D, 0.25), gb2(D, -0.5);
      cpu::layernorm_backward<double>(rows, D, x.data(), wp, mean.data(), rstd.data(), gy.data(), nullptr,
                                      gw2.data(), gb2.data());
      expect_close(gw2, gw, 0.0);
      expect_close(gb2, gb, 0.0);
    }
  }
}

TEMPLATE_TEST_CASE("groupnorm forward matches the reference", "[kernels][cpu]", float, double) {
  const double eps = 1e-5;
  const int64_t shapes[][4] = {{1, 6, 1, 1}, {2, 6, 5, 2}, {2, 6, 5, 3}, {3, 6, 7, 6}, {2, 4, 33, 2}};
  for (const auto& s : shapes) {
    const int64_t N = s[0], C = s[1], S = s[2], G = s[3];
    for (bool affine : {true, false}) {
      INFO("N=" << N << " C=" << C << " S=" << S << " G=" << G << " affine=" << affine);
      const auto x = cast<TestType>(random_vec(N * C * S, -2, 3, 800 + N * C * S));
      const auto w = cast<TestType>(random_vec(C, 0.5, 1.5, 801));
      const auto b = cast<TestType>(random_vec(C, -1, 1, 802));
      std::vector<TestType> y(x.size()), mean(N * G), rstd(N * G);
      cpu::groupnorm<TestType>(N, C, S, G, x.data(), affine ? w.data() : nullptr, affine ? b.data() : nullptr,
                               TestType(eps), y.data(), mean.data(), rstd.data());
      const Vec wd(w.begin(), w.end()), bd(b.begin(), b.end());
      const NormRef ref = ref_norm(Vec(x.begin(), x.end()), N * G, (C / G) * S, affine ? &wd : nullptr,
                                   affine ? &bd : nullptr, eps, [C, S](int64_t e) { return (e / S) % C; });
      expect_close(y, ref.y, tol<TestType>(), tol<TestType>());
      expect_close(mean, ref.mean, tol<TestType>(), tol<TestType>());
      expect_close(rstd, ref.rstd, tol<TestType>());
    }
  }
}

TEST_CASE("groupnorm backward matches finite differences", "[kernels][cpu]") {
  const double eps = 1e-5;
  const int64_t shapes[][4] = {{2, 6, 5, 3}, {1, 4, 7, 1}, {2, 6, 1, 6}};
  for (const auto& s : shapes) {
    const int64_t N = s[0], C = s[1], S = s[2], G = s[3];
    for (bool affine : {true, false}) {
      INFO("N=" << N << " C=" << C << " S=" << S << " G=" << G << " affine=" << affine);
      const Vec x = random_vec(N * C * S, -2, 2, 900 + N * C * S);
      const Vec w = random_vec(C, 0.5, 1.5, 901);
      const Vec b = random_vec(C, -1, 1, 902);
      const Vec gy = random_vec(N * C * S, -1, 1, 903);
      auto run = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
        Vec out(xv.size()), m(N * G), r(N * G);
        cpu::groupnorm<double>(N, C, S, G, xv.data(), affine ? wv.data() : nullptr, affine ? bv.data() : nullptr,
                               eps, out.data(), m.data(), r.data());
        return out;
      };
      Vec y(x.size()), mean(N * G), rstd(N * G);
      cpu::groupnorm<double>(N, C, S, G, x.data(), affine ? w.data() : nullptr, affine ? b.data() : nullptr, eps,
                             y.data(), mean.data(), rstd.data());
      Vec gx(x.size()), gw(C, 0.25), gb(C, -0.5);
      cpu::groupnorm_backward<double>(N, C, S, G, x.data(), affine ? w.data() : nullptr, mean.data(), rstd.data(),
                                      gy.data(), gx.data(), affine ? gw.data() : nullptr,
                                      affine ? gb.data() : nullptr);
      expect_grad(gx, fd_grad(x, gy, [&](const Vec& xv) { return run(xv, w, b); }));
      if (!affine) continue;
      Vec want_w = fd_grad(w, gy, [&](const Vec& wv) { return run(x, wv, b); });
      Vec want_b = fd_grad(b, gy, [&](const Vec& bv) { return run(x, w, bv); });
      for (int64_t c = 0; c < C; ++c) {
        want_w[c] += 0.25;
        want_b[c] -= 0.5;
      }
      expect_grad(gw, want_w);
      expect_grad(gb, want_b);
    }
  }
}
