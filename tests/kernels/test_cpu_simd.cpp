// The vector (runtime-dispatched) paths of the CPU kernels: lengths around the lane count (tails, 0, 1, 7, 17,
// 1025), the vector exp / erf / tanh and float exact GELU against fp64 in units of float rounding, binary ops on contiguous runs (vector)
// and strided / broadcast ones (scalar) giving the same IEEE results, and float layer norm and softmax rows
// against the fp64 kernels.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_info.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/softmax.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

namespace {

// Lengths below, at and past the widest vector (16 floats), none a multiple of it but 0.
const std::vector<int64_t> kTailLengths = {0, 1, 7, 16, 17, 1025};

// Worst |got - want| / |want| in units of float's machine epsilon (2^-23), over want != 0.
double worst_float_ulps(const std::vector<float>& got, const Vec& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0) continue;
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) / std::abs(want[i]));
  }
  return worst / std::numeric_limits<float>::epsilon();
}

}  // namespace

TEST_CASE("the vector kernels run on a SIMD target and the BLAS shares OpenMP", "[kernels][cpu][simd]") {
  const cpu::CpuInfo info = cpu::cpu_info();
  INFO("simd=" << info.simd_target << " blas=" << info.blas_threading << " core=" << info.blas_core);
  CHECK(!info.simd_target.empty());
  CHECK(info.simd_target != "Unknown");
  // meson.build links the OpenMP build whenever it is installed (tools/setup installs it).
  CHECK(info.blas_threading == "openmp");
}

TEST_CASE("vector exp, erf and tanh in float are within a few ulp of fp64", "[kernels][cpu][simd]") {
  struct Range {
    cpu::UnaryOp op;
    const char* name;
    double lo, hi;
    double (*fn)(double);
    double ulps;  // SLEEF's 1.0 for exp and tanh, plus the fp64 reference's own rounding to float; float erf is
                  // ShardRT's own two-range polynomial, measured at 2.3 (kernels/cpu/simd-inl.h)
  };
  // exp up to where float overflows and down to where it turns subnormal; erf and tanh across their bend into 1
  // (erf through the switch between its two ranges at |x| = 1).
  const std::vector<Range> ranges = {
      {cpu::UnaryOp::exp, "exp", -87.0, 88.0, [](double v) { return std::exp(v); }, 1.5},
      {cpu::UnaryOp::erf, "erf", -4.5, 4.5, [](double v) { return std::erf(v); }, 2.5},
      {cpu::UnaryOp::erf, "erf near 0", -1e-3, 1e-3, [](double v) { return std::erf(v); }, 2.5},
      {cpu::UnaryOp::tanh, "tanh", -9.0, 9.0, [](double v) { return std::tanh(v); }, 1.5}};
  for (const Range& r : ranges) {
    INFO(r.name);
    const int64_t n = 20001;
    std::vector<float> x(n), y(n);
    Vec want(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(r.lo + (r.hi - r.lo) * static_cast<double>(i) / static_cast<double>(n - 1));
      want[i] = r.fn(static_cast<double>(x[i]));
    }
    cpu::unary<float>(r.op, n, x.data(), y.data());
    const double worst = worst_float_ulps(y, want);
    INFO("worst " << worst << " ulp");
    CHECK(worst <= r.ulps);
  }
  // Saturation and specials through the vector path: exp overflows to inf and underflows to 0, erf and tanh reach
  // +-1, NaN stays NaN.
  const std::vector<float> special = {-200.0f, 200.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f};
  std::vector<float> e(special.size()), f(special.size()), t(special.size());
  cpu::unary<float>(cpu::UnaryOp::exp, 5, special.data(), e.data());
  cpu::unary<float>(cpu::UnaryOp::erf, 5, special.data(), f.data());
  cpu::unary<float>(cpu::UnaryOp::tanh, 5, special.data(), t.data());
  CHECK(e[0] == 0.0f);
  CHECK(std::isinf(e[1]));
  CHECK(std::isnan(e[2]));
  CHECK(e[3] == 1.0f);
  CHECK(f[0] == -1.0f);
  CHECK(f[1] == 1.0f);
  CHECK(std::isnan(f[2]));
  CHECK((f[4] == 0.0f && std::signbit(f[4])));
  CHECK(t[0] == -1.0f);
  CHECK(t[1] == 1.0f);
  CHECK(std::isnan(t[2]));
}

TEST_CASE("float exact GELU and its derivative are within a few ulp of fp64, far into the negative tail",
          "[kernels][cpu][simd]") {
  // GELU in float is x Q(|x|) or x (1 - Q(|x|)) from the normal tail Q (kernels/cpu/simd-inl.h), measured at 5.5
  // ulp relative at worst, over all of [-13, 13]: the negative side keeps its relative accuracy down to where
  // x cdf(x) leaves float's normal range (1 + erf(x / sqrt 2) would lose all of it below about -5). The fp64
  // reference takes erfc for the same reason.
  const int64_t n = 400001;
  std::vector<float> x(n), y(n), g(n), ones(n, 1.0f);
  Vec want(n), want_d(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(-13.0 + 26.0 * static_cast<double>(i) / static_cast<double>(n - 1));
    const double v = x[i], cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
    want[i] = v * cdf;
    want_d[i] = cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * 3.14159265358979323846);
  }
  cpu::unary<float>(cpu::UnaryOp::gelu_erf, n, x.data(), y.data());
  cpu::unary_backward<float>(cpu::UnaryOp::gelu_erf, n, x.data(), y.data(), ones.data(), g.data());
  const double worst = worst_float_ulps(y, want);
  INFO("gelu worst " << worst << " ulp");
  CHECK(worst <= 6.0);
  CHECK(worst > 0.0);  // the comparison ran on float results, not on copies of the reference
  // The derivative crosses 0 near x = -0.75, so it is bounded absolutely, in units of float's epsilon (of 1,
  // its size where it is largest): measured 2.5.
  double worst_d = 0;
  for (int64_t i = 0; i < n; ++i) worst_d = std::max(worst_d, std::abs(static_cast<double>(g[i]) - want_d[i]));
  INFO("gelu derivative worst abs " << worst_d);
  CHECK(worst_d <= 3.0 * std::numeric_limits<float>::epsilon());
  // Specials: inf stays inf, NaN stays NaN, the sign of zero is kept, -inf gives -inf * 0 = NaN (as the formula
  // and PyTorch do), a huge finite x gives x, and past -13.2 the result is 0.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, 1e30f, -40.0f};
  std::vector<float> s(special.size()), sd(special.size()), sones(special.size(), 1.0f);
  cpu::unary<float>(cpu::UnaryOp::gelu_erf, 7, special.data(), s.data());
  cpu::unary_backward<float>(cpu::UnaryOp::gelu_erf, 7, special.data(), s.data(), sones.data(), sd.data());
  CHECK(s[0] == inf);
  CHECK(std::isnan(s[1]));
  CHECK(std::isnan(s[2]));
  CHECK((s[3] == 0.0f && !std::signbit(s[3])));
  CHECK((s[4] == 0.0f && std::signbit(s[4])));
  CHECK(s[5] == 1e30f);
  CHECK(s[6] == 0.0f);
  CHECK(sd[3] == 0.5f);
  CHECK(sd[4] == 0.5f);
  CHECK(sd[5] == 1.0f);
  CHECK(sd[6] == 0.0f);
}

TEMPLATE_TEST_CASE("unary maps and their backward at every tail length", "[kernels][cpu][simd]", float, double) {
  const std::vector<std::pair<cpu::UnaryOp, const char*>> ops = {
      {cpu::UnaryOp::neg, "neg"},     {cpu::UnaryOp::exp, "exp"},           {cpu::UnaryOp::log, "log"},
      {cpu::UnaryOp::sqrt, "sqrt"},   {cpu::UnaryOp::rsqrt, "rsqrt"},       {cpu::UnaryOp::tanh, "tanh"},
      {cpu::UnaryOp::erf, "erf"},     {cpu::UnaryOp::abs, "abs"},           {cpu::UnaryOp::relu, "relu"},
      {cpu::UnaryOp::gelu_erf, "gelu_erf"}, {cpu::UnaryOp::gelu_tanh, "gelu_tanh"},
      {cpu::UnaryOp::silu, "silu"}, {cpu::UnaryOp::sigmoid, "sigmoid"}};
  const double h = 1e-6;
  for (const auto& [op, name] : ops) {
    const bool positive = op == cpu::UnaryOp::log || op == cpu::UnaryOp::sqrt || op == cpu::UnaryOp::rsqrt;
    for (int64_t n : kTailLengths) {
      INFO(name << " n=" << n);
      const Vec xd = positive ? random_vec(n, 0.1, 4.0, 900 + n) : random_away_from_zero(n, 1e-3, 4.0, 900 + n);
      const auto x = cast<TestType>(xd);
      // One guard element past the end: a tail that wrote beyond n would change it.
      std::vector<TestType> y(n + 1, TestType(-7)), gx(n + 1, TestType(-7));
      cpu::unary<TestType>(op, n, x.data(), y.data());
      const auto gy = cast<TestType>(random_vec(n, 900 + n + 1));
      cpu::unary_backward<TestType>(op, n, x.data(), y.data(), gy.data(), gx.data());
      CHECK(y[n] == TestType(-7));
      CHECK(gx[n] == TestType(-7));
      y.pop_back();
      gx.pop_back();
      Vec want(n), want_gx(n);
      for (int64_t i = 0; i < n; ++i) {
        const double xi = static_cast<double>(x[i]);
        want[i] = ref_unary(op, xi);
        // The derivative by central differences of the fp64 reference (smooth away from the kinks at 0).
        want_gx[i] = static_cast<double>(gy[i]) * (ref_unary(op, xi + h) - ref_unary(op, xi - h)) / (2 * h);
      }
      expect_close(y, want, tol<TestType>(), tol<TestType>());
      expect_close(gx, want_gx, std::is_same_v<TestType, float> ? 1e-5 : 1e-7, 1e-6);
    }
  }
}

TEMPLATE_TEST_CASE("binary ops give the same bits on contiguous (vector) and strided (scalar) operands",
                   "[kernels][cpu][simd]", float, double) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (cpu::BinaryOp op : {cpu::BinaryOp::add, cpu::BinaryOp::sub, cpu::BinaryOp::mul, cpu::BinaryOp::div,
                           cpu::BinaryOp::maximum, cpu::BinaryOp::minimum}) {
    for (int64_t n : kTailLengths) {
      INFO("op=" << static_cast<int>(op) << " n=" << n);
      Vec ad = random_vec(n, -3, 3, 950 + n), bd = random_vec(n, -3, 3, 951 + n);
      if (n > 5) ad[3] = nan, bd[5] = nan;  // NaN on either side of maximum / minimum
      const auto a = cast<TestType>(ad), b = cast<TestType>(bd);
      // Contiguous: one run, the vector body.
      std::vector<TestType> vec_out(n);
      const int64_t shape[1] = {n}, unit[1] = {1};
      cpu::binary<TestType>(op, 1, shape, a.data(), unit, b.data(), unit, vec_out.data());
      // The same values read through stride 2 (every other element of a padded copy): the scalar loop.
      std::vector<TestType> a2(2 * n + 1), b2(2 * n + 1), strided_out(n);
      for (int64_t i = 0; i < n; ++i) a2[2 * i] = a[i], b2[2 * i] = b[i];
      const int64_t two[1] = {2};
      cpu::binary<TestType>(op, 1, shape, a2.data(), two, b2.data(), two, strided_out.data());
      Vec want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = static_cast<double>(static_cast<TestType>(ref_binary(op, a[i], b[i])));
      for (int64_t i = 0; i < n; ++i) {
        const bool both_nan = std::isnan(vec_out[i]) && std::isnan(strided_out[i]);
        if (!both_nan) REQUIRE(vec_out[i] == strided_out[i]);
      }
      expect_close(vec_out, want, 0.0);
    }
  }
  // A row broadcast: the rows of a are contiguous runs (vector), b is read with stride 0 along them (scalar).
  const int64_t shape[2] = {3, 17}, a_strides[2] = {17, 1}, b_strides[2] = {0, 1}, b_scalar[2] = {0, 0};
  const auto a = cast<TestType>(random_vec(51, 960)), b = cast<TestType>(random_vec(17, 961));
  std::vector<TestType> out(51), out_scalar(51);
  cpu::binary<TestType>(cpu::BinaryOp::mul, 2, shape, a.data(), a_strides, b.data(), b_strides, out.data());
  cpu::binary<TestType>(cpu::BinaryOp::add, 2, shape, a.data(), a_strides, b.data(), b_scalar, out_scalar.data());
  for (int64_t i = 0; i < 51; ++i) {
    REQUIRE(out[i] == TestType(a[i] * b[i % 17]));
    REQUIRE(out_scalar[i] == TestType(a[i] + b[0]));
  }
}

TEST_CASE("float layer norm rows at every tail length match the fp64 kernel", "[kernels][cpu][simd]") {
  const double eps = 1e-5;
  for (int64_t D : {1, 7, 16, 17, 1025}) {
    for (int affine = 0; affine < 3; ++affine) {
      INFO("D=" << D << " affine=" << affine);
      const int64_t rows = 3;
      // Far from zero in one row, so the shifted statistics matter on the vector path too.
      // The fp64 kernel gets the float-rounded data, so the comparison measures the float kernel alone.
      Vec xd = random_vec(rows * D, -2, 3, 970 + D);
      for (int64_t j = 0; j < D; ++j) xd[j] += 3e3;
      xd = rounded<float>(xd);
      const Vec wd = rounded<float>(random_vec(D, 0.5, 1.5, 971)), bd = rounded<float>(random_vec(D, -1, 1, 972));
      const Vec gyd = rounded<float>(random_vec(rows * D, 973));
      const double* w64 = affine ? wd.data() : nullptr;
      const double* b64 = affine == 2 ? bd.data() : nullptr;
      Vec y(rows * D), mean(rows), rstd(rows), gx(rows * D), gw(D, 0.0), gb(D, 0.0);
      cpu::layernorm<double>(rows, D, xd.data(), w64, b64, eps, y.data(), mean.data(), rstd.data());
      cpu::layernorm_backward<double>(rows, D, xd.data(), w64, mean.data(), rstd.data(), gyd.data(), gx.data(),
                                      gw.data(), gb.data());
      const auto x = cast<float>(xd), w = cast<float>(wd), b = cast<float>(bd), gy = cast<float>(gyd);
      std::vector<float> fy(rows * D), fmean(rows), frstd(rows), fgx(rows * D), fgw(D, 0.0f), fgb(D, 0.0f);
      cpu::layernorm<float>(rows, D, x.data(), affine ? w.data() : nullptr, affine == 2 ? b.data() : nullptr,
                            float(eps), fy.data(), fmean.data(), frstd.data());
      cpu::layernorm_backward<float>(rows, D, x.data(), affine ? w.data() : nullptr, fmean.data(), frstd.data(),
                                     gy.data(), fgx.data(), fgw.data(), fgb.data());
      require_close(fy, y, 2e-5);
      require_close(fmean, mean, 1e-6);
      expect_close(frstd, rstd, 1e-5);
      // The backward works from the saved float mean, which for the row 3e3 from zero is off by up to ~1e-4 (half
      // an ulp of 3e3), so xhat and the grads that carry it are compared at that level.
      require_close(fgx, gx, 2e-3);
      require_close(fgw, gw, 2e-3);
      require_close(fgb, gb, 1e-5);
    }
  }
}

TEMPLATE_TEST_CASE("softmax rows at every tail length match the reference", "[kernels][cpu][simd]", float, double) {
  for (int64_t n : {1, 7, 16, 17, 1025}) {
    for (bool log : {false, true}) {
      INFO("n=" << n << " log=" << log);
      const View v{3, n, 1};
      const Vec xd = random_vec(v.size(), -6, 6, 980 + n), gyd = random_vec(v.size(), 981 + n);
      const auto x = cast<TestType>(xd), gy = cast<TestType>(gyd);
      std::vector<TestType> y(x.size()), gx(x.size());
      if (log) {
        cpu::log_softmax<TestType>(3, n, 1, x.data(), y.data());
        cpu::log_softmax_backward<TestType>(3, n, 1, y.data(), gy.data(), gx.data());
      } else {
        cpu::softmax<TestType>(3, n, 1, x.data(), y.data());
        cpu::softmax_backward<TestType>(3, n, 1, y.data(), gy.data(), gx.data());
      }
      const Vec want = ref_softmax(v, Vec(x.begin(), x.end()), log);
      expect_close(y, want, tol<TestType>(), tol<TestType>());
      // gx from the fp64 formulas on the fp64 output.
      Vec want_gx(x.size());
      for (int64_t o = 0; o < 3; ++o) {
        double s = 0;
        for (int64_t k = 0; k < n; ++k) s += log ? static_cast<double>(gy[o * n + k]) : gy[o * n + k] * want[o * n + k];
        for (int64_t k = 0; k < n; ++k) {
          const int64_t i = o * n + k;
          want_gx[i] = log ? gy[i] - std::exp(want[i]) * s : want[i] * (gy[i] - s);
        }
      }
      expect_close(gx, want_gx, tol<TestType>(), tol<TestType>());
    }
  }
  // NaN rules on the vector path: a NaN, +inf or an all -inf row turns its whole row NaN, and only its row.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {1, 2, std::numeric_limits<float>::quiet_NaN(), 7, inf, 3, -inf, -inf, -inf, -inf, 1, 2};
  std::vector<float> y(x.size());
  cpu::softmax<float>(4, 3, 1, x.data(), y.data());
  for (int i = 0; i < 9; ++i) CHECK(std::isnan(y[i]));
  CHECK(y[9] == 0.0f);  // -inf next to finite values is an ordinary zero
  CHECK(std::abs(y[9] + y[10] + y[11] - 1.0f) < 1e-6f);
}
