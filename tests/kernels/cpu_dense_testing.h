// Shared by the dense CPU kernel tests: plain fp64 reference loops, finite-difference helpers and comparisons.
#pragma once
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

inline Vec random_vec(int64_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(static_cast<size_t>(n));
  for (double& e : v) e = dist(gen);
  return v;
}

// Uniform in [-hi, -lo] U [lo, hi]: keeps inputs away from kinks at 0 and from division by ~0.
inline Vec random_away_from_zero(int64_t n, double lo, double hi, uint64_t seed) {
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
inline Vec fd_grad(Vec v, const Vec& gy, const std::function<Vec(const Vec&)>& forward, double h = 1e-6) {
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
inline void expect_grad(const Vec& analytic, const Vec& numeric) { expect_close(analytic, numeric, 1e-7, 1e-7); }

// ---------------------------------------------------------------------------------------------------------------
// References

inline Vec ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const Vec& A, int64_t lda,
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
inline int64_t strided_offset(int64_t i, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

inline int64_t numel(const std::vector<int64_t>& shape) {
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

inline Operand make_operand(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, const Vec& pool,
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
inline std::vector<BroadcastCase> broadcast_cases() {
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

inline double ref_binary(cpu::BinaryOp op, double a, double b) {
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

inline bool ref_compare(cpu::CompareOp op, double a, double b) {
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

inline double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

inline double ref_unary(cpu::UnaryOp op, double x) {
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

inline const std::vector<UnaryCase>& unary_cases() {
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

inline Vec unary_input(const UnaryCase& c, int64_t n, uint64_t seed) {
  return c.positive_domain ? random_vec(n, 0.1, 4.0, seed) : random_away_from_zero(n, 1e-3, 3.0, seed);
}

struct View {
  int64_t outer, n, inner;
  int64_t size() const { return outer * n * inner; }
  int64_t at(int64_t o, int64_t k, int64_t j) const { return (o * n + k) * inner + j; }
};

// Odd sizes, inner == 1 and inner > 1, and an inner extent above one 256-column block.
inline const std::vector<View>& reduce_views() {
  static const std::vector<View> views = {{1, 1, 1}, {1, 7, 1}, {3, 33, 1},  {2, 7, 5},
                                          {1, 130, 3}, {4, 1, 33}, {2, 5, 300}, {5, 130, 1}};
  return views;
}

// Applies fn(o, j, column) to each (o, j) column of x, collecting one output per column.
inline Vec ref_reduce(const View& v, const Vec& x, const std::function<double(const Vec&)>& fn) {
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

inline double col_sum(const Vec& c) {
  double s = 0.0;
  for (double e : c) s += e;
  return s;
}
inline double col_max(const Vec& c) {
  double m = -kInf;
  for (double e : c) m = e > m ? e : m;
  return m;
}
inline double col_logsumexp(const Vec& c) {
  const double m = col_max(c);
  double s = 0.0;
  for (double e : c) s += std::exp(e - m);
  return m + std::log(s);
}

// Softmax reference over each column, written straight from the definition with a max shift.
inline Vec ref_softmax(const View& v, const Vec& x, bool log) {
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
inline NormRef ref_norm(const Vec& x, int64_t groups, int64_t block, const Vec* weight, const Vec* bias, double eps,
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
