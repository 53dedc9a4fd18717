// Dense CPU kernels, part 1: gemm and the elementwise family against plain fp64 reference loops; backward kernels
// against central finite differences of the forward kernels in fp64.
#include "cpu_dense_testing.h"

// =================================================================================================================
// GEMM

TEMPLATE_TEST_CASE("gemm matches the reference for every transpose and padded leading dimensions", "[kernels][cpu]",
                   float, double) {
  const double rtol = std::is_same_v<TestType, double> ? 1e-12 : 1e-5;
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 33, 5}, {33, 7, 130}, {130, 1, 7}};
  uint64_t seed = 1;
  for (const auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      // Leading dimensions padded by 3 so a kernel that assumes packed rows reads the wrong elements.
      const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 3, ldc = N + 3;
      const Vec A = random_vec((ta ? K : M) * lda, -1, 1, seed++);
      const Vec B = random_vec((tb ? N : K) * ldb, -1, 1, seed++);
      const Vec C0 = random_vec(M * ldc, -1, 1, seed++);
      for (double beta : {0.0, 1.0, -0.5}) {
        INFO("M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb << " beta=" << beta);
        auto C = cast<TestType>(C0);
        const auto a = cast<TestType>(A), b = cast<TestType>(B);
        cpu::gemm<TestType>(ta, tb, M, N, K, TestType(1.5), a.data(), lda, b.data(), ldb, TestType(beta), C.data(),
                            ldc);
        // The reference runs on the T-rounded inputs so the float comparison only sees accumulation error.
        const Vec want = ref_gemm(ta, tb, M, N, K, 1.5, Vec(a.begin(), a.end()), lda, Vec(b.begin(), b.end()), ldb,
                                  beta, C0, ldc);
        expect_close(C, want, rtol, rtol);
      }
    }
  }
}

TEST_CASE("gemm degenerate sizes", "[kernels][cpu]") {
  const Vec A = random_vec(64, -1, 1, 11), B = random_vec(64, -1, 1, 12);
  SECTION("K == 0 scales C by beta") {
    Vec C = random_vec(3 * 4, -1, 1, 13);
    const Vec C0 = C;
    cpu::gemm<double>(false, false, 3, 4, 0, 2.0, A.data(), 1, B.data(), 4, 0.5, C.data(), 4);
    Vec want(C0.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * C0[i];
    expect_close(C, want, 0.0);
  }
  SECTION("K == 0 with beta == 0 overwrites C, NaN included") {
    Vec C(3 * 4, kNaN);
    cpu::gemm<double>(true, true, 3, 4, 0, 1.0, A.data(), 3, B.data(), 1, 0.0, C.data(), 4);
    expect_close(C, Vec(12, 0.0), 0.0);
  }
  SECTION("beta == 0 drops NaN already in C") {
    Vec C(2 * 3, kNaN);
    cpu::gemm<double>(false, false, 2, 3, 4, 1.0, A.data(), 4, B.data(), 3, 0.0, C.data(), 3);
    expect_close(C, ref_gemm(false, false, 2, 3, 4, 1.0, A, 4, B, 3, 0.0, Vec(6, 0.0), 3), 1e-14);
  }
  SECTION("alpha == 0 ignores A and B") {
    Vec nan_a(64, kNaN);
    Vec C = random_vec(6, -1, 1, 14);
    const Vec C0 = C;
    cpu::gemm<double>(false, false, 2, 3, 5, 0.0, nan_a.data(), 5, B.data(), 3, 2.0, C.data(), 3);
    Vec want(6);
    for (size_t i = 0; i < 6; ++i) want[i] = 2.0 * C0[i];
    expect_close(C, want, 0.0);
  }
  SECTION("M == 0 or N == 0 leaves C untouched") {
    Vec C(8, 7.0);
    cpu::gemm<double>(false, false, 0, 4, 5, 1.0, A.data(), 5, B.data(), 4, 0.0, C.data(), 4);
    cpu::gemm<double>(false, false, 2, 0, 5, 1.0, A.data(), 5, B.data(), 1, 0.0, C.data(), 1);
    expect_close(C, Vec(8, 7.0), 0.0);
  }
}

TEMPLATE_TEST_CASE("gemm_batched with shared and strided operands", "[kernels][cpu]", float, double) {
  const double rtol = std::is_same_v<TestType, double> ? 1e-12 : 1e-5;
  const int64_t M = 5, N = 7, K = 33, batch = 3;
  for (int shared = 0; shared < 3; ++shared) {
    // shared: 0 none, 1 A shared (stride 0), 2 B shared. Batch strides leave padding between matrices. B is
    // stored transposed (N x K).
    const int64_t stride_a = shared == 1 ? 0 : M * K + 2;
    const int64_t stride_b = shared == 2 ? 0 : N * K + 5;
    const int64_t stride_c = M * N + 1;
    const auto A = cast<TestType>(random_vec(batch * (M * K + 2), -1, 1, 20 + shared));
    const auto B = cast<TestType>(random_vec(batch * (N * K + 5), -1, 1, 30 + shared));
    std::vector<TestType> C(static_cast<size_t>(batch * stride_c), TestType(9));
    cpu::gemm_batched<TestType>(false, true, M, N, K, TestType(1), A.data(), K, B.data(), K, TestType(0), C.data(), N,
                                batch, stride_a, stride_b, stride_c);
    Vec want(C.size(), 9.0);
    for (int64_t i = 0; i < batch; ++i) {
      const Vec a(A.begin() + i * stride_a, A.begin() + i * stride_a + M * K);
      const Vec b(B.begin() + i * stride_b, B.begin() + i * stride_b + N * K);
      const Vec c = ref_gemm(false, true, M, N, K, 1.0, a, K, b, K, 0.0, Vec(M * N, 0.0), N);
      std::copy(c.begin(), c.end(), want.begin() + i * stride_c);
    }
    INFO("shared=" << shared);
    expect_close(C, want, rtol, rtol);
  }
  // An empty batch reads nothing and writes nothing.
  std::vector<TestType> C(4, TestType(3));
  cpu::gemm_batched<TestType>(false, false, 2, 2, 2, TestType(1), nullptr, 2, nullptr, 2, TestType(0), C.data(), 2, 0,
                              4, 4, 4);
  expect_close(C, Vec(4, 3.0), 0.0);
}

// =================================================================================================================
// Elementwise

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
