// kernels/cpu/reduce: sum, mean, max/min with index, argmax and logsumexp against fp64 column references (ties,
// NaN, infinities, empty axes, long float sums); backward kernels against central finite differences.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/reduce.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/kernels/cpu_kernel_cases.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEMPLATE_TEST_CASE("reductions match the reference", "[kernels][cpu]", float, double) {
  for (const View& v : reduce_views()) {
    INFO("outer=" << v.outer << " n=" << v.n << " inner=" << v.inner);
    const auto x = cast<TestType>(random_vec(v.size(), -2, 2, 200 + v.size()));
    const Vec xd(x.begin(), x.end());
    const size_t m = static_cast<size_t>(v.outer * v.inner);
    std::vector<TestType> y(m);
    std::vector<int64_t> idx(m, -1), arg(m, -1);

    cpu::reduce_sum<TestType>(v.outer, v.n, v.inner, x.data(), y.data());
    expect_close(y, ref_reduce(v, xd, col_sum), tol<TestType>(), tol<TestType>());
    cpu::reduce_mean<TestType>(v.outer, v.n, v.inner, x.data(), y.data());
    expect_close(y, ref_reduce(v, xd, [](const Vec& c) { return col_sum(c) / static_cast<double>(c.size()); }),
                 tol<TestType>(), tol<TestType>());
    cpu::reduce_logsumexp<TestType>(v.outer, v.n, v.inner, x.data(), y.data());
    expect_close(y, ref_reduce(v, xd, col_logsumexp), tol<TestType>());

    // Reference index: first position of the extreme (strict comparison keeps the first of ties).
    auto first_extreme = [](const Vec& c, bool max) {
      size_t best = 0;
      for (size_t k = 1; k < c.size(); ++k) {
        if (max ? c[k] > c[best] : c[k] < c[best]) best = k;
      }
      return best;
    };
    for (bool max : {true, false}) {
      INFO((max ? "max" : "min"));
      if (max) {
        cpu::reduce_max<TestType>(v.outer, v.n, v.inner, x.data(), y.data(), idx.data());
      } else {
        cpu::reduce_min<TestType>(v.outer, v.n, v.inner, x.data(), y.data(), idx.data());
      }
      const Vec want_idx = ref_reduce(v, xd, [&](const Vec& c) { return double(first_extreme(c, max)); });
      const Vec want_val = ref_reduce(v, xd, [&](const Vec& c) { return c[first_extreme(c, max)]; });
      expect_close(idx, want_idx, 0.0);
      expect_close(y, want_val, 0.0);
      if (max) {
        cpu::reduce_argmax<TestType>(v.outer, v.n, v.inner, x.data(), arg.data());
        expect_close(arg, want_idx, 0.0);
      }
    }
  }
}

TEST_CASE("reductions: ties, NaN, infinities and empty axes", "[kernels][cpu]") {
  SECTION("ties give the first index") {
    const Vec x = {1.0, 3.0, 3.0, 2.0, 1.0};
    double y = 0;
    int64_t idx = -1, arg = -1;
    cpu::reduce_max<double>(1, 5, 1, x.data(), &y, &idx);
    cpu::reduce_argmax<double>(1, 5, 1, x.data(), &arg);
    CHECK(y == 3.0);
    CHECK(idx == 1);
    CHECK(arg == 1);
    cpu::reduce_min<double>(1, 5, 1, x.data(), &y, &idx);
    CHECK(y == 1.0);
    CHECK(idx == 0);
  }
  SECTION("the first NaN wins max and min") {
    const Vec x = {1.0, kNaN, 5.0, kNaN};
    double y = 0;
    int64_t idx = -1, arg = -1;
    cpu::reduce_max<double>(1, 4, 1, x.data(), &y, &idx);
    CHECK(std::isnan(y));
    CHECK(idx == 1);
    cpu::reduce_min<double>(1, 4, 1, x.data(), &y, &idx);
    CHECK(std::isnan(y));
    CHECK(idx == 1);
    cpu::reduce_argmax<double>(1, 4, 1, x.data(), &arg);
    CHECK(arg == 1);
  }
  SECTION("logsumexp of infinite and large rows") {
    // Rows of (outer=5, n=2, inner=1).
    const Vec x = {-kInf, -kInf, kInf, 0.0, 1000.0, 1000.0, -kInf, 0.0, kNaN, 0.0};
    Vec y(5);
    cpu::reduce_logsumexp<double>(5, 2, 1, x.data(), y.data());
    expect_close(y, {-kInf, kInf, 1000.0 + std::log(2.0), 0.0, kNaN}, 1e-15);
  }
  SECTION("n == 0: sum 0, mean NaN, logsumexp -inf") {
    const int64_t outer = 3, inner = 2;
    const Vec none;
    Vec y(outer * inner, 5.0);
    cpu::reduce_sum<double>(outer, 0, inner, none.data(), y.data());
    expect_close(y, Vec(6, 0.0), 0.0);
    cpu::reduce_mean<double>(outer, 0, inner, none.data(), y.data());
    expect_close(y, Vec(6, kNaN), 0.0);
    cpu::reduce_mean<double>(outer, 0, 1, none.data(), y.data());
    expect_close(Vec(y.begin(), y.begin() + 3), Vec(3, kNaN), 0.0);
    cpu::reduce_logsumexp<double>(outer, 0, inner, none.data(), y.data());
    expect_close(y, Vec(6, -kInf), 0.0);
  }
  SECTION("zero outer or inner writes nothing") {
    Vec y = {4.0};
    const Vec x = {1.0};
    cpu::reduce_sum<float>(0, 3, 1, nullptr, nullptr);
    cpu::reduce_sum<double>(1, 1, 0, x.data(), y.data());
    CHECK(y[0] == 4.0);
  }
}

TEST_CASE("float sums of a million elements keep full precision", "[kernels][cpu]") {
  // Naive float accumulation of 1e6 values near 0.1 drifts by ~1e-4 relative; double accumulation stays within
  // float rounding of the result.
  const int64_t n = 1000000;
  std::vector<float> x(n);
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(0.05f, 0.15f);
  for (float& e : x) e = dist(gen);
  SECTION("one row") {
    double want = 0.0;
    for (float e : x) want += e;
    float y = 0, mean = 0;
    cpu::reduce_sum<float>(1, n, 1, x.data(), &y);
    cpu::reduce_mean<float>(1, n, 1, x.data(), &mean);
    CHECK(std::abs(y - want) <= 1e-7 * want);
    CHECK(std::abs(mean - want / n) <= 1e-7 * want / n);
  }
  SECTION("down a column (inner > 1)") {
    const int64_t inner = 4, rows = n / inner;
    Vec want(inner, 0.0);
    for (int64_t k = 0; k < rows; ++k) {
      for (int64_t j = 0; j < inner; ++j) want[j] += x[k * inner + j];
    }
    std::vector<float> y(inner);
    cpu::reduce_sum<float>(1, rows, inner, x.data(), y.data());
    expect_close(y, want, 1e-7);
  }
}

TEST_CASE("reduction backward kernels match finite differences", "[kernels][cpu]") {
  for (const View& v : {View{2, 7, 5}, View{3, 33, 1}, View{1, 1, 4}}) {
    INFO("outer=" << v.outer << " n=" << v.n << " inner=" << v.inner);
    const size_t m = static_cast<size_t>(v.outer * v.inner);
    const Vec x = random_vec(v.size(), -2, 2, 300 + v.size());
    const Vec gy = random_vec(static_cast<int64_t>(m), -1, 1, 301);
    Vec gx(x.size(), 99.0);
    auto forward = [&](auto kernel) {
      return [&, kernel](const Vec& in) {
        Vec out(m);
        kernel(v.outer, v.n, v.inner, in.data(), out.data());
        return out;
      };
    };

    cpu::reduce_sum_backward<double>(v.outer, v.n, v.inner, gy.data(), gx.data());
    expect_grad(gx, fd_grad(x, gy, forward(cpu::reduce_sum<double>)));

    cpu::reduce_mean_backward<double>(v.outer, v.n, v.inner, gy.data(), gx.data());
    expect_grad(gx, fd_grad(x, gy, forward(cpu::reduce_mean<double>)));

    Vec y(m);
    cpu::reduce_logsumexp<double>(v.outer, v.n, v.inner, x.data(), y.data());
    cpu::reduce_logsumexp_backward<double>(v.outer, v.n, v.inner, x.data(), y.data(), gy.data(), gx.data());
    expect_grad(gx, fd_grad(x, gy, forward(cpu::reduce_logsumexp<double>)));

    std::vector<int64_t> idx(m);
    for (bool max : {true, false}) {
      INFO((max ? "max" : "min"));
      auto extreme = [max](int64_t o, int64_t n, int64_t i, const double* in, double* out) {
        std::vector<int64_t> ignored(static_cast<size_t>(o * i));
        if (max) {
          cpu::reduce_max<double>(o, n, i, in, out, ignored.data());
        } else {
          cpu::reduce_min<double>(o, n, i, in, out, ignored.data());
        }
      };
      if (max) {
        cpu::reduce_max<double>(v.outer, v.n, v.inner, x.data(), y.data(), idx.data());
      } else {
        cpu::reduce_min<double>(v.outer, v.n, v.inner, x.data(), y.data(), idx.data());
      }
      std::fill(gx.begin(), gx.end(), 99.0);  // must be overwritten, zeros included
      cpu::reduce_index_backward<double>(v.outer, v.n, v.inner, idx.data(), gy.data(), gx.data());
      expect_grad(gx, fd_grad(x, gy, forward(extreme)));
    }
  }
  SECTION("logsumexp backward: -inf entries get 0, an all -inf row gets 0 not NaN") {
    const Vec x = {-kInf, 0.0, 1.0, -kInf, -kInf, -kInf};  // rows of (2, 3, 1)
    const Vec gy = {2.0, 3.0};
    Vec y(2), gx(6);
    cpu::reduce_logsumexp<double>(2, 3, 1, x.data(), y.data());
    cpu::reduce_logsumexp_backward<double>(2, 3, 1, x.data(), y.data(), gy.data(), gx.data());
    const double s = 1.0 + std::exp(1.0);
    expect_close(gx, {0.0, 2.0 / s, 2.0 * std::exp(1.0) / s, 0.0, 0.0, 0.0}, 1e-15);
  }
}
