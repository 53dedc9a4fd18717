// kernels/cpu/elementwise: unary maps, pow_scalar, clamp, affine/fill/axpy, broadcasting binary, compare and
// where through strides, against fp64 references; backward kernels against central finite differences.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/support/strided_operand.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

namespace {

// Contiguous, scalar and row/column broadcasts, transposed and reversed inputs, size-1 dimensions, 0-d, an empty
// output, and one case large enough to be split into chunks that end mid-row.
std::vector<BroadcastCase> broadcast_cases() {
  return {
      {"contiguous", {33, 7}, {7, 1}, {7, 1}},
      {"b scalar", {33, 7}, {7, 1}, {0, 0}},
      {"a scalar", {33, 7}, {0, 0}, {7, 1}},
      {"b row broadcast", {33, 7}, {7, 1}, {0, 1}},
      {"a column broadcast", {33, 7}, {1, 0}, {7, 1}},
      {"outer product", {33, 7}, {1, 0}, {0, 1}},
      {"a transposed", {7, 33}, {1, 7}, {33, 1}},
      {"size-1 dims and mixed broadcast", {3, 1, 5, 4}, {20, 20, 4, 1}, {4, 0, 0, 1}},
      {"reversed, broadcast middle, chunked", {2, 130, 151}, {19630, 151, -1}, {0, 1, 0}},
      {"1-d length 1", {1}, {5}, {0}},
      {"0-d", {}, {}, {}},
      {"empty", {4, 0, 3}, {0, 3, 1}, {3, 3, 1}},
  };
}

struct UnaryCase {
  cpu::UnaryOp op;
  const char* name;
  bool positive_domain;  // log, sqrt, rsqrt
};

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {cpu::UnaryOp::neg, "neg", false},       {cpu::UnaryOp::exp, "exp", false},
      {cpu::UnaryOp::log, "log", true},        {cpu::UnaryOp::sqrt, "sqrt", true},
      {cpu::UnaryOp::rsqrt, "rsqrt", true},    {cpu::UnaryOp::tanh, "tanh", false},
      {cpu::UnaryOp::erf, "erf", false},       {cpu::UnaryOp::abs, "abs", false},
      {cpu::UnaryOp::relu, "relu", false},     {cpu::UnaryOp::gelu_erf, "gelu_erf", false},
      {cpu::UnaryOp::gelu_tanh, "gelu_tanh", false}, {cpu::UnaryOp::silu, "silu", false},
      {cpu::UnaryOp::sigmoid, "sigmoid", false},
  };
  return cases;
}

Vec unary_input(const UnaryCase& c, int64_t n, uint64_t seed) {
  return c.positive_domain ? random_vec(n, 0.1, 4.0, seed) : random_away_from_zero(n, 1e-3, 3.0, seed);
}

}  // namespace

TEMPLATE_TEST_CASE("unary forward matches the reference", "[kernels][cpu]", float, double) {
  for (const UnaryCase& c : unary_cases()) {
    for (int64_t n : {1, 7, 33, 130, 40000}) {
      INFO(c.name << " n=" << n);
      const auto x = cast<TestType>(unary_input(c, n, 100 + n));
      std::vector<TestType> y(x.size());
      cpu::unary<TestType>(c.op, n, x.data(), y.data());
      Vec want(x.size());
      for (size_t i = 0; i < x.size(); ++i) want[i] = ref_unary(c.op, x[i]);
      expect_close(y, want, tol<TestType>(), tol<TestType>());
    }
  }
}

TEST_CASE("unary special values", "[kernels][cpu]") {
  auto apply = [](cpu::UnaryOp op, Vec x) {
    cpu::unary<double>(op, static_cast<int64_t>(x.size()), x.data(), x.data());  // in place
    return x;
  };
  // Saturating inputs stay finite: a naive exp(-x) overflows for x = -800.
  expect_close(apply(cpu::UnaryOp::sigmoid, {-800.0, 800.0, 0.0}), {0.0, 1.0, 0.5}, 0.0);
  expect_close(apply(cpu::UnaryOp::silu, {-800.0, 800.0}), {0.0, 800.0}, 0.0);
  expect_close(apply(cpu::UnaryOp::gelu_erf, {1.0}), {0.8413447460685429}, 1e-15);
  expect_close(apply(cpu::UnaryOp::relu, {kNaN, -0.5, 2.0}), {kNaN, 0.0, 2.0}, 0.0);
  expect_close(apply(cpu::UnaryOp::abs, {kNaN, -0.5}), {kNaN, 0.5}, 0.0);
  expect_close(apply(cpu::UnaryOp::rsqrt, {4.0}), {0.5}, 0.0);

  // Kink conventions: relu'(0) = abs'(0) = 0.
  const Vec zero = {0.0}, one = {1.0};
  Vec gx = {5.0};
  cpu::unary_backward<double>(cpu::UnaryOp::relu, 1, zero.data(), zero.data(), one.data(), gx.data());
  CHECK(gx[0] == 0.0);
  gx = {5.0};
  cpu::unary_backward<double>(cpu::UnaryOp::abs, 1, zero.data(), zero.data(), one.data(), gx.data());
  CHECK(gx[0] == 0.0);
}

TEST_CASE("unary backward matches finite differences", "[kernels][cpu]") {
  const int64_t n = 33;
  const double h = 1e-6;
  for (const UnaryCase& c : unary_cases()) {
    INFO(c.name);
    const Vec x = unary_input(c, n, 7);
    const Vec gy = random_vec(n, -1, 1, 8);
    Vec y(n), gx(n);
    cpu::unary<double>(c.op, n, x.data(), y.data());
    cpu::unary_backward<double>(c.op, n, x.data(), y.data(), gy.data(), gx.data());
    // The op is elementwise, so one shifted evaluation of the whole vector gives every partial derivative.
    Vec xp = x, xm = x, yp(n), ym(n), numeric(n);
    for (int64_t i = 0; i < n; ++i) {
      xp[i] += h;
      xm[i] -= h;
    }
    cpu::unary<double>(c.op, n, xp.data(), yp.data());
    cpu::unary<double>(c.op, n, xm.data(), ym.data());
    for (int64_t i = 0; i < n; ++i) numeric[i] = gy[i] * (yp[i] - ym[i]) / (2 * h);
    expect_grad(gx, numeric);

    // The float instantiation agrees with the fp64 backward.
    const auto xf = cast<float>(x), gyf = cast<float>(gy);
    std::vector<float> yf(n), gxf(n);
    cpu::unary<float>(c.op, n, xf.data(), yf.data());
    cpu::unary_backward<float>(c.op, n, xf.data(), yf.data(), gyf.data(), gxf.data());
    expect_close(gxf, gx, 1e-4, 1e-5);
  }
}

TEST_CASE("pow_scalar forward and backward", "[kernels][cpu]") {
  const int64_t n = 33;
  const Vec x = random_vec(n, 0.1, 3.0, 40);
  const Vec gy = random_vec(n, -1, 1, 41);
  for (double p : {2.0, 3.0, 1.0, 0.5, -1.5}) {
    INFO("p=" << p);
    Vec y(n), gx(n), want(n);
    cpu::pow_scalar<double>(n, x.data(), p, y.data());
    for (int64_t i = 0; i < n; ++i) want[i] = std::pow(x[i], p);
    expect_close(y, want, 1e-14);
    cpu::pow_scalar_backward<double>(n, x.data(), p, gy.data(), gx.data());
    expect_grad(gx, fd_grad(x, gy, [&](const Vec& v) {
                  Vec out(v.size());
                  cpu::pow_scalar<double>(n, v.data(), p, out.data());
                  return out;
                }));
  }
  SECTION("squares of negative inputs") {
    const Vec neg = {-3.0, -0.5};
    const Vec g = {1.0, 2.0};
    Vec y(2), gx(2);
    cpu::pow_scalar<double>(2, neg.data(), 2.0, y.data());
    cpu::pow_scalar_backward<double>(2, neg.data(), 2.0, g.data(), gx.data());
    expect_close(y, {9.0, 0.25}, 0.0);
    expect_close(gx, {-6.0, -2.0}, 0.0);
  }
  SECTION("p == 0 gives ones and a zero grad, also at x == 0") {
    const Vec z = {0.0, 2.0};
    const Vec g = {1.0, 1.0};
    Vec y(2), gx(2, 7.0);
    cpu::pow_scalar<double>(2, z.data(), 0.0, y.data());
    cpu::pow_scalar_backward<double>(2, z.data(), 0.0, g.data(), gx.data());
    expect_close(y, {1.0, 1.0}, 0.0);
    expect_close(gx, {0.0, 0.0}, 0.0);
  }
}

TEST_CASE("clamp forward and backward", "[kernels][cpu]") {
  const Vec x = {-2.0, -1.0, -0.5, 0.0, 0.3, 1.0, 1.5, kNaN};
  const Vec gy = {1, 2, 3, 4, 5, 6, 7, 8};
  const int64_t n = static_cast<int64_t>(x.size());
  Vec y(n), gx(n);
  cpu::clamp<double>(n, x.data(), -1.0, 1.0, y.data());
  expect_close(y, {-1.0, -1.0, -0.5, 0.0, 0.3, 1.0, 1.0, kNaN}, 0.0);
  // Bounds included: x == lo and x == hi pass the grad.
  cpu::clamp_backward<double>(n, x.data(), -1.0, 1.0, gy.data(), gx.data());
  expect_close(gx, {0, 2, 3, 4, 5, 6, 0, 0}, 0.0);

  SECTION("finite differences away from the bounds") {
    const Vec xs = random_away_from_zero(33, 0.05, 0.95, 42);  // inside (-1, 1)
    Vec outside = random_vec(33, 1.05, 2.0, 43);
    Vec all = xs;
    all.insert(all.end(), outside.begin(), outside.end());
    const Vec g = random_vec(66, -1, 1, 44);
    Vec grad(66);
    cpu::clamp_backward<double>(66, all.data(), -1.0, 1.0, g.data(), grad.data());
    expect_grad(grad, fd_grad(all, g, [](const Vec& v) {
                  Vec out(v.size());
                  cpu::clamp<double>(static_cast<int64_t>(v.size()), v.data(), -1.0, 1.0, out.data());
                  return out;
                }));
  }
  SECTION("lo > hi gives hi; infinite bounds clamp one side") {
    Vec out(n);
    cpu::clamp<double>(3, x.data(), 2.0, 1.0, out.data());
    CHECK(out[0] == 1.0);
    CHECK(out[2] == 1.0);
    cpu::clamp<double>(n - 1, x.data(), 0.0, kInf, out.data());
    expect_close(Vec(out.begin(), out.end() - 1), {0, 0, 0, 0, 0.3, 1.0, 1.5}, 0.0);
  }
}

TEMPLATE_TEST_CASE("affine, fill and axpy", "[kernels][cpu]", float, double) {
  for (int64_t n : {0, 1, 7, 130, 40000}) {
    INFO("n=" << n);
    const auto x = cast<TestType>(random_vec(n, -1, 1, 50 + n));
    const auto y0 = cast<TestType>(random_vec(n, -1, 1, 60 + n));
    std::vector<TestType> y(x.size());
    cpu::affine<TestType>(n, x.data(), TestType(-1.5), TestType(0.25), y.data());
    Vec want(x.size());
    for (int64_t i = 0; i < n; ++i) want[i] = -1.5 * x[i] + 0.25;
    expect_close(y, want, tol<TestType>(), tol<TestType>());

    y = y0;
    cpu::axpy<TestType>(n, TestType(0.5), x.data(), y.data());
    for (int64_t i = 0; i < n; ++i) want[i] = y0[i] + 0.5 * x[i];
    expect_close(y, want, tol<TestType>(), tol<TestType>());

    cpu::fill<TestType>(n, TestType(3.5), y.data());
    expect_close(y, Vec(x.size(), 3.5), 0.0);
  }
}

TEMPLATE_TEST_CASE("binary ops broadcast through strides", "[kernels][cpu]", float, double) {
  const Vec a_pool = random_vec(64, 0.25, 2.0, 70);  // positive so pow is defined
  const Vec b_pool = random_away_from_zero(64, 0.25, 2.0, 71);
  const std::pair<cpu::BinaryOp, const char*> ops[] = {
      {cpu::BinaryOp::add, "add"}, {cpu::BinaryOp::sub, "sub"},         {cpu::BinaryOp::mul, "mul"},
      {cpu::BinaryOp::div, "div"}, {cpu::BinaryOp::pow, "pow"},         {cpu::BinaryOp::maximum, "maximum"},
      {cpu::BinaryOp::minimum, "minimum"}};
  constexpr double kSentinel = 12345.0;
  for (const BroadcastCase& bc : broadcast_cases()) {
    const Operand a = make_operand(bc.shape, bc.a_strides, a_pool, 72);
    const Operand b = make_operand(bc.shape, bc.b_strides, b_pool, 73);
    const auto a_data = cast<TestType>(a.data), b_data = cast<TestType>(b.data);
    const int64_t count = numel(bc.shape);
    for (const auto& [op, name] : ops) {
      INFO(bc.name << " " << name);
      // One extra element past the end must survive: a kernel writing out of bounds fails here.
      std::vector<TestType> out(static_cast<size_t>(count + 1), TestType(kSentinel));
      cpu::binary<TestType>(op, static_cast<int>(bc.shape.size()), bc.shape.data(), a_data.data() + a.base,
                            bc.a_strides.data(), b_data.data() + b.base, bc.b_strides.data(), out.data());
      Vec want(static_cast<size_t>(count + 1), kSentinel);
      for (int64_t i = 0; i < count; ++i) {
        want[i] = ref_binary(op, static_cast<TestType>(a.at(i, bc.shape)), static_cast<TestType>(b.at(i, bc.shape)));
      }
      expect_close(out, want, tol<TestType>());
    }
  }
}

TEST_CASE("binary maximum and minimum propagate NaN", "[kernels][cpu]") {
  const Vec a = {kNaN, 1.0, 2.0}, b = {0.0, kNaN, 1.0};
  const int64_t shape[] = {3}, strides[] = {1};
  Vec out(3);
  cpu::binary<double>(cpu::BinaryOp::maximum, 1, shape, a.data(), strides, b.data(), strides, out.data());
  expect_close(out, {kNaN, kNaN, 2.0}, 0.0);
  cpu::binary<double>(cpu::BinaryOp::minimum, 1, shape, a.data(), strides, b.data(), strides, out.data());
  expect_close(out, {kNaN, kNaN, 1.0}, 0.0);
}

TEMPLATE_TEST_CASE("compare ops broadcast through strides", "[kernels][cpu]", float, double) {
  const Vec pool = {-2.0, -1.0, 0.0, 1.0, 2.0};  // small integers so equal pairs are common
  const std::pair<cpu::CompareOp, const char*> ops[] = {{cpu::CompareOp::eq, "eq"}, {cpu::CompareOp::ne, "ne"},
                                                        {cpu::CompareOp::lt, "lt"}, {cpu::CompareOp::le, "le"},
                                                        {cpu::CompareOp::gt, "gt"}, {cpu::CompareOp::ge, "ge"}};
  for (const BroadcastCase& bc : broadcast_cases()) {
    const Operand a = make_operand(bc.shape, bc.a_strides, pool, 80);
    const Operand b = make_operand(bc.shape, bc.b_strides, pool, 81);
    const auto a_data = cast<TestType>(a.data), b_data = cast<TestType>(b.data);
    const int64_t count = numel(bc.shape);
    for (const auto& [op, name] : ops) {
      INFO(bc.name << " " << name);
      std::vector<uint8_t> out(static_cast<size_t>(count + 1), 77);
      cpu::compare<TestType>(op, static_cast<int>(bc.shape.size()), bc.shape.data(), a_data.data() + a.base,
                             bc.a_strides.data(), b_data.data() + b.base, bc.b_strides.data(), out.data());
      Vec want(static_cast<size_t>(count + 1), 77.0);
      for (int64_t i = 0; i < count; ++i) want[i] = ref_compare(op, a.at(i, bc.shape), b.at(i, bc.shape)) ? 1 : 0;
      expect_close(out, want, 0.0);
    }
  }
  SECTION("NaN compares false except ne") {
    const std::vector<TestType> a = {TestType(kNaN)}, b = {TestType(1)};
    const int64_t shape[] = {1}, strides[] = {1};
    for (const auto& [op, name] : ops) {
      INFO(name);
      uint8_t out = 9;
      cpu::compare<TestType>(op, 1, shape, a.data(), strides, b.data(), strides, &out);
      CHECK(out == (op == cpu::CompareOp::ne ? 1 : 0));
    }
  }
}

TEMPLATE_TEST_CASE("where selects through broadcast strides", "[kernels][cpu]", float, double) {
  struct WhereCase {
    const char* name;
    std::vector<int64_t> shape, c_strides, a_strides, b_strides;
  };
  const std::vector<WhereCase> cases = {
      {"contiguous", {33, 7}, {7, 1}, {7, 1}, {7, 1}},
      {"masked fill: row mask, scalar a", {33, 7}, {0, 1}, {0, 0}, {7, 1}},
      {"column mask, transposed a, row b", {7, 33}, {1, 0}, {1, 7}, {0, 1}},
      {"chunked, reversed a, scalar b", {2, 130, 151}, {0, 151, 1}, {19630, 151, -1}, {0, 0, 0}},
      {"0-d", {}, {}, {}, {}},
      {"empty", {0, 5}, {5, 1}, {5, 1}, {5, 1}},
  };
  const Vec cond_pool = {0.0, 1.0, 7.0};  // any nonzero byte selects a
  for (const WhereCase& wc : cases) {
    INFO(wc.name);
    const Operand c = make_operand(wc.shape, wc.c_strides, cond_pool, 90);
    const Operand a = make_operand(wc.shape, wc.a_strides, random_vec(32, -1, 1, 91), 92);
    const Operand b = make_operand(wc.shape, wc.b_strides, random_vec(32, 2, 3, 93), 94);
    const std::vector<uint8_t> c_data(c.data.begin(), c.data.end());
    const auto a_data = cast<TestType>(a.data), b_data = cast<TestType>(b.data);
    const int64_t count = numel(wc.shape);
    std::vector<TestType> out(static_cast<size_t>(count + 1), TestType(-9));
    cpu::where<TestType>(static_cast<int>(wc.shape.size()), wc.shape.data(), c_data.data() + c.base,
                         wc.c_strides.data(), a_data.data() + a.base, wc.a_strides.data(), b_data.data() + b.base,
                         wc.b_strides.data(), out.data());
    Vec want(static_cast<size_t>(count + 1), -9.0);
    for (int64_t i = 0; i < count; ++i) {
      want[i] = static_cast<TestType>(c.at(i, wc.shape) != 0 ? a.at(i, wc.shape) : b.at(i, wc.shape));
    }
    expect_close(out, want, 0.0);
  }
}
