// kernels/cpu/softmax: softmax and log_softmax against the fp64 definition, -inf entries, and both backward
// kernels against central finite differences.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/softmax.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/kernels/cpu_kernel_cases.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEMPLATE_TEST_CASE("softmax and log_softmax match the reference", "[kernels][cpu]", float, double) {
  for (const View& v : reduce_views()) {
    INFO("outer=" << v.outer << " n=" << v.n << " inner=" << v.inner);
    // Shifted far from zero: without the max shift exp overflows.
    Vec xd = random_vec(v.size(), -3, 3, 400 + v.size());
    for (double& e : xd) e += 500.0;
    const auto x = cast<TestType>(xd);
    xd.assign(x.begin(), x.end());
    std::vector<TestType> y(x.size());
    cpu::softmax<TestType>(v.outer, v.n, v.inner, x.data(), y.data());
    expect_close(y, ref_softmax(v, xd, false), tol<TestType>(), tol<TestType>());
    cpu::log_softmax<TestType>(v.outer, v.n, v.inner, x.data(), y.data());
    expect_close(y, ref_softmax(v, xd, true), tol<TestType>(), tol<TestType>());
    y = x;  // in place
    cpu::softmax<TestType>(v.outer, v.n, v.inner, y.data(), y.data());
    expect_close(y, ref_softmax(v, xd, false), tol<TestType>(), tol<TestType>());
  }
}

TEST_CASE("softmax with -inf entries", "[kernels][cpu]") {
  // (outer=1, n=3, inner=2): column 0 has one masked entry, column 1 is fully masked.
  const Vec x = {-kInf, -kInf, 0.0, -kInf, std::log(3.0), -kInf};
  Vec y(6);
  cpu::softmax<double>(1, 3, 2, x.data(), y.data());
  expect_close(y, {0.0, kNaN, 0.25, kNaN, 0.75, kNaN}, 1e-15);
  cpu::log_softmax<double>(1, 3, 2, x.data(), y.data());
  expect_close(y, {-kInf, kNaN, std::log(0.25), kNaN, std::log(0.75), kNaN}, 1e-15);
}

TEST_CASE("softmax backward kernels match finite differences", "[kernels][cpu]") {
  for (const View& v : reduce_views()) {
    if (v.size() > 400) continue;  // finite differences cost O(size^2)
    INFO("outer=" << v.outer << " n=" << v.n << " inner=" << v.inner);
    const Vec x = random_vec(v.size(), -2, 2, 500 + v.size());
    const Vec gy = random_vec(v.size(), -1, 1, 501);
    for (bool log : {false, true}) {
      INFO((log ? "log_softmax" : "softmax"));
      auto forward = [&](const Vec& in) {
        Vec out(in.size());
        (log ? cpu::log_softmax<double> : cpu::softmax<double>)(v.outer, v.n, v.inner, in.data(), out.data());
        return out;
      };
      const Vec y = forward(x);
      Vec gx(x.size());
      (log ? cpu::log_softmax_backward<double> : cpu::softmax_backward<double>)(v.outer, v.n, v.inner, y.data(),
                                                                                 gy.data(), gx.data());
      expect_grad(gx, fd_grad(x, gy, forward));
    }
  }
}
