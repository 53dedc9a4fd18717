// Dense CPU kernels (gemm, elementwise, reductions, softmax, norms) against plain fp64 reference loops, and their
// backward kernels against central finite differences of the forward kernels in fp64.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <sstream>
#include <type_traits>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/softmax.h"

namespace cpu = shardrt::kernels::cpu;

namespace {

using Vec = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Vec random_vec(int64_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(static_cast<size_t>(n));
  for (double& e : v) e = dist(gen);
  return v;
}

// Uniform in [-hi, -lo] U [lo, hi]: keeps inputs away from kinks at 0 and from division by ~0.
Vec random_away_from_zero(int64_t n, double lo, double hi, uint64_t seed) {
  Vec v = random_vec(n, lo, hi, seed);
  for (size_t i = 0; i < v.size(); i += 2) v[i] = -v[i];
  return v;
}

template <typename T>
std::vector<T> cast(const Vec& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Element i passes when both are NaN, both are the same value (infinities included) or
// |got - want| <= atol + rtol * |want|. Reports the count and the first failure.
template <typename T>
void expect_close(const std::vector<T>& got, const Vec& want, double rtol, double atol = 0.0) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double w = want[i];
    const bool ok = (std::isnan(g) && std::isnan(w)) || g == w || std::abs(g - w) <= atol + rtol * std::abs(w);
    if (!ok && bad++ == 0) first << "index " << i << ": got " << g << ", want " << w;
  }
  INFO(bad << " of " << want.size() << " mismatches; first at " << first.str());
  CHECK(bad == 0);
}

// Tolerance for comparing a kernel in T against the fp64 reference.
template <typename T>
double tol() {
  return std::is_same_v<T, double> ? 1e-12 : 2e-5;
}

// Central-difference gradient of L(v) = sum_i gy[i] * forward(v)[i] with respect to every element of v.
Vec fd_grad(Vec v, const Vec& gy, const std::function<Vec(const Vec&)>& forward, double h = 1e-6) {
  Vec grad(v.size());
  auto loss = [&](const Vec& at) {
    const Vec y = forward(at);
    double l = 0.0;
    for (size_t i = 0; i < y.size(); ++i) l += gy[i] * y[i];
    return l;
  };
  for (size_t i = 0; i < v.size(); ++i) {
    const double saved = v[i];
    v[i] = saved + h;
    const double up = loss(v);
    v[i] = saved - h;
    const double down = loss(v);
    v[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// Finite-difference tolerance: ~1e-7 relative, with the same absolute floor for grads near zero.
void expect_grad(const Vec& analytic, const Vec& numeric) { expect_close(analytic, numeric, 1e-7, 1e-7); }

// ---------------------------------------------------------------------------------------------------------------
// References

Vec ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const Vec& A, int64_t lda,
             const Vec& B, int64_t ldb, double beta, const Vec& C, int64_t ldc) {
  Vec out = C;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * lda + i] : A[i * lda + k];
        const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      out[i * ldc + j] = alpha * acc + (beta == 0.0 ? 0.0 : beta * C[i * ldc + j]);
    }
  }
  return out;
}

// Element offset of flat row-major index i of `shape` in an operand with `strides`.
int64_t strided_offset(int64_t i, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// A strided input: `data` holds every element the strides can reach, and `base` is where index 0 lies (past the
// start when a stride is negative).
struct Operand {
  Vec data;
  std::vector<int64_t> strides;
  int64_t base = 0;
  double at(int64_t flat, const std::vector<int64_t>& shape) const {
    return data[base + strided_offset(flat, shape, strides)];
  }
};

Operand make_operand(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, const Vec& pool,
                     uint64_t seed) {
  Operand op;
  op.strides = strides;
  int64_t span = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) continue;
    span += (shape[d] - 1) * std::abs(strides[d]);
    if (strides[d] < 0) op.base += (shape[d] - 1) * -strides[d];
  }
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  op.data.resize(static_cast<size_t>(span));
  for (double& e : op.data) e = pool[pick(gen)];
  return op;
}

struct BroadcastCase {
  const char* name;
  std::vector<int64_t> shape;
  std::vector<int64_t> a_strides;
  std::vector<int64_t> b_strides;
};

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

double ref_binary(cpu::BinaryOp op, double a, double b) {
  switch (op) {
    case cpu::BinaryOp::add: return a + b;
    case cpu::BinaryOp::sub: return a - b;
    case cpu::BinaryOp::mul: return a * b;
    case cpu::BinaryOp::div: return a / b;
    case cpu::BinaryOp::pow: return std::pow(a, b);
    case cpu::BinaryOp::maximum: return std::isnan(a) || std::isnan(b) ? kNaN : (a > b ? a : b);
    case cpu::BinaryOp::minimum: return std::isnan(a) || std::isnan(b) ? kNaN : (a < b ? a : b);
  }
  return kNaN;
}

bool ref_compare(cpu::CompareOp op, double a, double b) {
  switch (op) {
    case cpu::CompareOp::eq: return a == b;
    case cpu::CompareOp::ne: return a != b;
    case cpu::CompareOp::lt: return a < b;
    case cpu::CompareOp::le: return a <= b;
    case cpu::CompareOp::gt: return a > b;
    case cpu::CompareOp::ge: return a >= b;
  }
  return false;
}

double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double ref_unary(cpu::UnaryOp op, double x) {
  switch (op) {
    case cpu::UnaryOp::neg: return -x;
    case cpu::UnaryOp::exp: return std::exp(x);
    case cpu::UnaryOp::log: return std::log(x);
    case cpu::UnaryOp::sqrt: return std::sqrt(x);
    case cpu::UnaryOp::rsqrt: return 1.0 / std::sqrt(x);
    case cpu::UnaryOp::tanh: return std::tanh(x);
    case cpu::UnaryOp::erf: return std::erf(x);
    case cpu::UnaryOp::abs: return x < 0 ? -x : x;
    case cpu::UnaryOp::relu: return x > 0 ? x : 0.0;
    case cpu::UnaryOp::gelu_erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case cpu::UnaryOp::gelu_tanh: {
      const double k = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case cpu::UnaryOp::silu: return x * ref_sigmoid(x);
    case cpu::UnaryOp::sigmoid: return ref_sigmoid(x);
  }
  return kNaN;
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

struct View {
  int64_t outer, n, inner;
  int64_t size() const { return outer * n * inner; }
  int64_t at(int64_t o, int64_t k, int64_t j) const { return (o * n + k) * inner + j; }
};

// Odd sizes, inner == 1 and inner > 1, and an inner extent above one 256-column block.
const std::vector<View>& reduce_views() {
  static const std::vector<View> views = {{1, 1, 1}, {1, 7, 1}, {3, 33, 1},  {2, 7, 5},
                                          {1, 130, 3}, {4, 1, 33}, {2, 5, 300}, {5, 130, 1}};
  return views;
}

// Applies fn(o, j, column) to each (o, j) column of x, collecting one output per column.
Vec ref_reduce(const View& v, const Vec& x, const std::function<double(const Vec&)>& fn) {
  Vec y(static_cast<size_t>(v.outer * v.inner));
  Vec column(static_cast<size_t>(v.n));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t j = 0; j < v.inner; ++j) {
      for (int64_t k = 0; k < v.n; ++k) column[k] = x[v.at(o, k, j)];
      y[o * v.inner + j] = fn(column);
    }
  }
  return y;
}

double col_sum(const Vec& c) {
  double s = 0.0;
  for (double e : c) s += e;
  return s;
}
double col_max(const Vec& c) {
  double m = -kInf;
  for (double e : c) m = e > m ? e : m;
  return m;
}
double col_logsumexp(const Vec& c) {
  const double m = col_max(c);
  double s = 0.0;
  for (double e : c) s += std::exp(e - m);
  return m + std::log(s);
}

// Softmax reference over each column, written straight from the definition with a max shift.
Vec ref_softmax(const View& v, const Vec& x, bool log) {
  Vec y(x.size());
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t j = 0; j < v.inner; ++j) {
      double m = -kInf;
      for (int64_t k = 0; k < v.n; ++k) m = std::max(m, x[v.at(o, k, j)]);
      double s = 0.0;
      for (int64_t k = 0; k < v.n; ++k) s += std::exp(x[v.at(o, k, j)] - m);
      for (int64_t k = 0; k < v.n; ++k) {
        const double z = x[v.at(o, k, j)] - m;
        y[v.at(o, k, j)] = log ? z - std::log(s) : std::exp(z) / s;
      }
    }
  }
  return y;
}

struct NormRef {
  Vec y, mean, rstd;
};

// Normalises `groups` contiguous blocks of `block` elements each; channel_of maps an element to its affine index.
NormRef ref_norm(const Vec& x, int64_t groups, int64_t block, const Vec* weight, const Vec* bias, double eps,
                 const std::function<int64_t(int64_t)>& channel_of) {
  NormRef r{Vec(x.size()), Vec(static_cast<size_t>(groups)), Vec(static_cast<size_t>(groups))};
  for (int64_t g = 0; g < groups; ++g) {
    double mean = 0.0;
    for (int64_t i = 0; i < block; ++i) mean += x[g * block + i];
    mean /= static_cast<double>(block);
    double var = 0.0;
    for (int64_t i = 0; i < block; ++i) var += (x[g * block + i] - mean) * (x[g * block + i] - mean);
    var /= static_cast<double>(block);
    const double rstd = 1.0 / std::sqrt(var + eps);
    r.mean[g] = mean;
    r.rstd[g] = rstd;
    for (int64_t i = 0; i < block; ++i) {
      const int64_t e = g * block + i;
      const int64_t c = channel_of(e);
      r.y[e] = (x[e] - mean) * rstd * (weight ? (*weight)[c] : 1.0) + (bias ? (*bias)[c] : 0.0);
    }
  }
  return r;
}

}  // namespace

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

// =================================================================================================================
// Reductions

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

// =================================================================================================================
// Softmax

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

// =================================================================================================================
// Norms

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

TEST_CASE("parallel kernels give the same bits for any thread count", "[kernels][cpu]") {
  const int saved_threads = omp_get_max_threads();
  // fp64, whose sums show any change of summation order in the last bits (fp32 results rounded from fp64
  // accumulators would hide it). Large enough that every kernel below splits its work.
  const int64_t rows = 256, D = 512;
  const auto x = cast<double>(random_vec(rows * D, -2, 2, 1000));
  const auto w = cast<double>(random_vec(D, 0.5, 1.5, 1001));
  const auto gy = cast<double>(random_vec(rows * D, -1, 1, 1002));
  struct Result {
    std::vector<double> ln_gx, ln_gw, ln_gb, gn_gx, gn_gw, gn_gb, sums, softmax;
  };
  auto run_all = [&]() {
    Result r;
    std::vector<double> y(x.size()), mean(rows), rstd(rows);
    cpu::layernorm<double>(rows, D, x.data(), w.data(), nullptr, 1e-5, y.data(), mean.data(), rstd.data());
    r.ln_gx.resize(x.size());
    r.ln_gw.assign(D, 0.0);
    r.ln_gb.assign(D, 0.0);
    cpu::layernorm_backward<double>(rows, D, x.data(), w.data(), mean.data(), rstd.data(), gy.data(), r.ln_gx.data(),
                                   r.ln_gw.data(), r.ln_gb.data());
    // Groupnorm on the same buffer viewed as (N=4, C=64, S=512), 8 groups.
    const int64_t N = 4, C = 64, S = 512, G = 8;
    std::vector<double> gmean(N * G), grstd(N * G);
    cpu::groupnorm<double>(N, C, S, G, x.data(), w.data(), nullptr, 1e-5, y.data(), gmean.data(), grstd.data());
    r.gn_gx.resize(x.size());
    r.gn_gw.assign(C, 0.0);
    r.gn_gb.assign(C, 0.0);
    cpu::groupnorm_backward<double>(N, C, S, G, x.data(), w.data(), gmean.data(), grstd.data(), gy.data(),
                                   r.gn_gx.data(), r.gn_gw.data(), r.gn_gb.data());
    r.sums.resize(D + rows);
    cpu::reduce_sum<double>(1, rows, D, x.data(), r.sums.data());
    cpu::reduce_sum<double>(rows, D, 1, x.data(), r.sums.data() + D);
    r.softmax.resize(x.size());
    cpu::softmax<double>(1, rows, D, x.data(), r.softmax.data());
    return r;
  };
  omp_set_num_threads(1);
  const Result serial = run_all();
  omp_set_num_threads(3);
  const Result threaded = run_all();
  omp_set_num_threads(saved_threads);
  CHECK(serial.ln_gx == threaded.ln_gx);
  CHECK(serial.ln_gw == threaded.ln_gw);
  CHECK(serial.ln_gb == threaded.ln_gb);
  CHECK(serial.gn_gx == threaded.gn_gx);
  CHECK(serial.gn_gw == threaded.gn_gw);
  CHECK(serial.gn_gb == threaded.gn_gb);
  CHECK(serial.sums == threaded.sums);
  CHECK(serial.softmax == threaded.softmax);
}
