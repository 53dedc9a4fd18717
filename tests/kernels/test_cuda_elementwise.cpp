// kernels/cuda/elementwise: what the op-level parity table cannot reach. In-place unary maps, relu/abs NaN and
// kink rules, pow_scalar and clamp edge values (exact and inverted bounds, NaN, p == 0), fill and axpy, and the
// strided kernels with negative strides, all 8 dims and NaN operands. Skipped, with a warning, without a CUDA
// device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.h"
#include "runtime/cuda_context.h"
#include "tests/kernels/cuda_testing.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/support/strided_operand.h"
#include "tests/support/cuda_skip.h"

namespace cpu = shardrt::kernels::cpu;
namespace cu = shardrt::kernels::cuda;
using namespace shardrt::test;

namespace {

const std::vector<int64_t> kSizes = {0, 1, 7, 33, 1000, 4099};

// Contiguous (the fast path), scalar, row/column and middle broadcasts, transposed and reversed inputs, size-1
// dims, all 8 dims, 0-d and an empty output.
std::vector<BroadcastCase> broadcast_cases() {
  return {
      {"contiguous", {4099}, {1}, {1}},
      {"contiguous 2-d", {33, 7}, {7, 1}, {7, 1}},
      {"b scalar", {33, 7}, {7, 1}, {0, 0}},
      {"outer product", {33, 7}, {1, 0}, {0, 1}},
      {"a transposed", {7, 33}, {1, 7}, {33, 1}},
      {"reversed rows and columns", {5, 9}, {9, -1}, {-9, 1}},
      {"size-1 dims and middle broadcast", {3, 1, 5, 4}, {20, 20, 4, 1}, {4, 0, 0, 1}},
      {"8 dims", {2, 3, 1, 2, 3, 2, 1, 3}, {108, 36, 36, 18, 6, 3, 3, 1}, {0, 1, 0, 3, 0, 6, 0, 12}},
      {"0-d", {}, {}, {}},
      {"empty", {4, 0, 3}, {0, 3, 1}, {3, 3, 1}},
  };
}

}  // namespace

TEMPLATE_TEST_CASE("cuda unary: in place equals out of place; relu and abs propagate NaN, kinks have derivative 0",
                   "[cuda][kernels]", float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  const cu::UnaryOp ops[] = {cu::UnaryOp::neg,  cu::UnaryOp::exp,      cu::UnaryOp::log,       cu::UnaryOp::sqrt,
                             cu::UnaryOp::rsqrt, cu::UnaryOp::tanh,    cu::UnaryOp::erf,       cu::UnaryOp::abs,
                             cu::UnaryOp::relu, cu::UnaryOp::gelu_erf, cu::UnaryOp::gelu_tanh, cu::UnaryOp::silu,
                             cu::UnaryOp::sigmoid};
  // In place (y aliases x) gives the bits of the out-of-place run, whose values the parity table checks.
  const Vec x = rounded<T>(random_vec(4099, 0.1, 4.0, 300));
  for (cu::UnaryOp op : ops) {
    INFO("op " << static_cast<int>(op));
    DeviceBuffer<T> dx(cast<T>(x)), dy(x.size());
    cu::unary<T>(op, static_cast<int64_t>(x.size()), dx.get(), dy.get(), stream());
    cu::unary<T>(op, static_cast<int64_t>(x.size()), dx.get(), dx.get(), stream());
    CHECK(dx.download() == dy.download());
  }
  // NaN propagates through relu and abs; the kinks at 0 have derivative 0.
  const Vec special = {kNaN, 0.0, -0.0, 2.0, -3.0};
  const Vec gy = {1, 1, 1, 1, 1};
  for (cu::UnaryOp op : {cu::UnaryOp::relu, cu::UnaryOp::abs}) {
    DeviceBuffer<T> dx(cast<T>(special)), dy(special.size()), dgy(cast<T>(gy)), dgx(special.size());
    cu::unary<T>(op, 5, dx.get(), dy.get(), stream());
    cu::unary_backward<T>(op, 5, dx.get(), dy.get(), dgy.get(), dgx.get(), stream());
    const Vec want_y = op == cu::UnaryOp::relu ? Vec{kNaN, 0, 0, 2, 0} : Vec{kNaN, 0, 0, 2, 3};
    const Vec want_gx = op == cu::UnaryOp::relu ? Vec{0, 0, 0, 1, 0} : Vec{0, 0, 0, 1, -1};
    expect_close(widen(dy.download()), want_y, 0, 0);
    expect_close(widen(dgx.download()), want_gx, 0, 0);
  }
}

TEMPLATE_TEST_CASE("cuda pow_scalar, clamp, affine, fill and axpy with their backward", "[cuda][kernels]", float,
                   double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  uint64_t seed = 400;
  for (int64_t n : kSizes) {
    INFO("n=" << n);
    Vec x = rounded<T>(random_vec(n, -2, 2, ++seed));
    const Vec gy = rounded<T>(random_vec(n, -1, 1, ++seed));
    if (n >= 7) {  // exact bounds, a zero and a NaN, for clamp's inclusive grad and NaN rule
      x[1] = -0.5;
      x[2] = 0.75;
      x[3] = 0.0;
      x[4] = kNaN;
    }
    const Vec x_pos = rounded<T>(random_vec(n, 0.1, 3, ++seed));
    DeviceBuffer<T> dx(cast<T>(x)), dpos(cast<T>(x_pos)), dgy(cast<T>(gy)), dy(n), dgx(n);

    for (double p : {2.0, 0.5, 3.0, 0.0}) {
      INFO("p=" << p);
      cu::pow_scalar<T>(n, dpos.get(), static_cast<T>(p), dy.get(), stream());
      cu::pow_scalar_backward<T>(n, dpos.get(), static_cast<T>(p), dgy.get(), dgx.get(), stream());
      Vec want_y(n), want_gx(n);
      for (int64_t i = 0; i < n; ++i) {
        want_y[i] = std::pow(x_pos[i], p);
        want_gx[i] = p == 0.0 ? 0.0 : gy[i] * p * std::pow(x_pos[i], p - 1);
      }
      expect_close(widen(dy.download()), want_y, tol<T>(), 0);
      expect_close(widen(dgx.download()), want_gx, tol<T>(), tol<T>() * 0.1);
    }
    // p == 0 gives exactly zero grads even at x == 0 (and with x holding NaN).
    cu::pow_scalar_backward<T>(n, dx.get(), T(0), dgy.get(), dgx.get(), stream());
    expect_close(widen(dgx.download()), Vec(n, 0.0), 0, 0);

    const struct {
      double lo, hi;
    } bounds[] = {{-0.5, 0.75}, {-kInf, 0.25}, {0.5, -0.5}};  // exact in float, like x's special values
    for (const auto& bd : bounds) {
      INFO("clamp [" << bd.lo << ", " << bd.hi << "]");
      cu::clamp<T>(n, dx.get(), static_cast<T>(bd.lo), static_cast<T>(bd.hi), dy.get(), stream());
      cu::clamp_backward<T>(n, dx.get(), static_cast<T>(bd.lo), static_cast<T>(bd.hi), dgy.get(), dgx.get(), stream());
      Vec want_y(n), want_gx(n);
      for (int64_t i = 0; i < n; ++i) {
        want_y[i] = std::isnan(x[i]) ? kNaN : (bd.lo > bd.hi ? bd.hi : std::min(std::max(x[i], bd.lo), bd.hi));
        want_gx[i] = (bd.lo <= x[i] && x[i] <= bd.hi) ? gy[i] : 0.0;
      }
      expect_close(widen(dy.download()), want_y, 0, 0);
      expect_close(widen(dgx.download()), want_gx, 0, 0);
    }

    cu::affine<T>(n, dx.get(), T(1.5), T(-2), dy.get(), stream());
    Vec want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = 1.5 * x[i] - 2;
    expect_close(widen(dy.download()), want, tol<T>(), tol<T>());

    cu::fill<T>(n, T(3.25), dy.get(), stream());
    expect_close(widen(dy.download()), Vec(n, 3.25), 0, 0);
    cu::axpy<T>(n, T(0.5), dgy.get(), dy.get(), stream());
    for (int64_t i = 0; i < n; ++i) want[i] = 3.25 + 0.5 * gy[i];
    expect_close(widen(dy.download()), want, tol<T>(), 0);
  }
}

TEMPLATE_TEST_CASE("cuda broadcasting binary, compare and where over strided inputs", "[cuda][kernels]", float,
                   double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  // One op set for both backends (kernels/elementwise_ops.h): reference.h defines each op the CUDA kernel runs.
  using shardrt::kernels::BinaryOp, shardrt::kernels::CompareOp;
  const BinaryOp binary_ops[] = {BinaryOp::add,  BinaryOp::sub,     BinaryOp::mul,    BinaryOp::div,
                                 BinaryOp::pow,  BinaryOp::maximum, BinaryOp::minimum};
  const CompareOp compare_ops[] = {CompareOp::eq, CompareOp::ne, CompareOp::lt,
                                   CompareOp::le, CompareOp::gt, CompareOp::ge};
  uint64_t seed = 500;
  for (const BroadcastCase& bc : broadcast_cases()) {
    INFO(bc.name);
    const int ndim = static_cast<int>(bc.shape.size());
    const int64_t n = numel(bc.shape);
    // a > 0 keeps pow real; b stays away from 0 for div. Values on a 1/4 grid make equal pairs common for the
    // comparisons, and a NaN on each side checks NaN propagation and the NaN comparison rules.
    Operand a = make_operand(bc.shape, bc.a_strides, 0.25, 2, ++seed);
    Operand b = make_operand(bc.shape, bc.b_strides, 0.25, 2, ++seed);
    for (double& v : a.data) v = std::round(v * 4) / 4;
    for (std::size_t i = 0; i < b.data.size(); ++i) b.data[i] = (i % 3 == 0 ? -1 : 1) * std::round(b.data[i] * 4) / 4;
    if (a.data.size() > 3) a.data[3] = kNaN;
    if (b.data.size() > 5) b.data[5] = kNaN;
    Operand cond = a;  // same layout as a, its own values
    for (std::size_t i = 0; i < cond.data.size(); ++i) cond.data[i] = (i * 7) % 3 == 0 ? 1 : 0;
    std::vector<uint8_t> cond_bytes(cond.data.begin(), cond.data.end());

    DeviceBuffer<T> da(cast<T>(a.data)), db(cast<T>(b.data)), dout(n);
    DeviceBuffer<uint8_t> dcond(cond_bytes), dflags(n);
    const T* pa = da.get() + a.base;
    const T* pb = db.get() + b.base;

    for (const BinaryOp op : binary_ops) {
      INFO("binary op " << static_cast<int>(op));
      cu::binary<T>(op, ndim, bc.shape.data(), pa, bc.a_strides.data(), pb, bc.b_strides.data(), dout.get(),
                    stream());
      Vec want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = ref_binary(op, a.at(i, bc.shape), b.at(i, bc.shape));
      expect_close(widen(dout.download()), want, tol<T>() * 0.1, 0);
    }
    for (const CompareOp op : compare_ops) {
      INFO("compare op " << static_cast<int>(op));
      cu::compare<T>(op, ndim, bc.shape.data(), pa, bc.a_strides.data(), pb, bc.b_strides.data(), dflags.get(),
                     stream());
      Vec want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = ref_compare(op, a.at(i, bc.shape), b.at(i, bc.shape)) ? 1 : 0;
      expect_close(widen(dflags.download()), want, 0, 0);
    }
    cu::where<T>(ndim, bc.shape.data(), dcond.get() + cond.base, cond.strides.data(), pa, bc.a_strides.data(), pb,
                 bc.b_strides.data(), dout.get(), stream());
    Vec want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = cond.at(i, bc.shape) != 0 ? a.at(i, bc.shape) : b.at(i, bc.shape);
    expect_close(widen(dout.download()), want, 0, 0);
  }
}
