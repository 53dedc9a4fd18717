// Helpers of the optimizer tests: a small module with a matrix, a vector, a tall matrix and a scalar-like
// parameter, fp64 reference updates written out per element (independent of optim/'s loops), grads set into the
// bound arena views.
#pragma once
#include <cmath>
#include <vector>

#include "autograd/tape.h"
#include "models/module.h"
#include "runtime/factories.h"

namespace shardrt::test {

struct ToyParams : models::Module {
  explicit ToyParams(DType dtype = DType::f64, uint64_t seed = 7) {
    Generator gen(seed);
    w = randn({3, 5}, {DType::f64}, &gen).to(dtype).clone();
    b = randn({5}, {DType::f64}, &gen).to(dtype).clone();
    v = randn({4, 2}, {DType::f64}, &gen).to(dtype).clone();
    s = randn({1}, {DType::f64}, &gen).to(dtype).clone();
    register_parameter("w", &w);
    register_parameter("b", &b);
    register_parameter("v", &v);
    register_parameter("s", &s);
  }
  Tensor w, b, v, s;
};

// Writes grads drawn from `seed` into every parameter's bound grad; returns them (f64), in named order.
inline std::vector<std::vector<double>> set_grads(models::Module& m, uint64_t seed) {
  Generator gen(seed);
  std::vector<std::vector<double>> out;
  for (auto& [name, p] : m.named_parameters()) {
    const Tensor g = randn(p.shape(), {DType::f64}, &gen);
    grad_of(p).copy_(g.to(p.dtype()));
    out.push_back(grad_of(p).to_vector());
  }
  return out;
}

inline std::vector<std::vector<double>> values(const models::Module& m) {
  std::vector<std::vector<double>> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(p.to_vector());
  return out;
}

// ---- fp64 references, one parameter at a time ----
struct RefAdamW {
  double lr, b1, b2, eps, wd;
  std::vector<double> m, v;
  void step(std::vector<double>& p, const std::vector<double>& g, int t, double lr_t) {
    if (m.empty()) m.assign(p.size(), 0), v.assign(p.size(), 0);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] = p[i] * (1 - lr_t * wd);
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr_t * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

// Plain triple loops: the Newton-Schulz iteration as torch writes it (X = a X + (b A + c A^2) X, A = X X^T).
inline std::vector<double> ref_newton_schulz(std::vector<double> u, int rows, int cols, int steps = 5,
                                             double a = 3.4445, double b = -4.7750, double c = 2.0315) {
  const bool tall = rows > cols;
  const int m = tall ? cols : rows, n = tall ? rows : cols;
  std::vector<double> X(m * n);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) (tall ? X[j * n + i] : X[i * n + j]) = u[i * cols + j];
  double norm = 0;
  for (double x : X) norm += x * x;
  norm = std::max(std::sqrt(norm), 1e-7);
  for (double& x : X) x /= norm;
  for (int s = 0; s < steps; ++s) {
    std::vector<double> A(m * m, 0), B(m * m, 0), Y(m * n, 0);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j)
        for (int k = 0; k < n; ++k) A[i * m + j] += X[i * n + k] * X[j * n + k];
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < m; ++j) {
        double aa = 0;
        for (int k = 0; k < m; ++k) aa += A[i * m + k] * A[k * m + j];
        B[i * m + j] = b * A[i * m + j] + c * aa;
      }
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double bx = 0;
        for (int k = 0; k < m; ++k) bx += B[i * m + k] * X[k * n + j];
        Y[i * n + j] = a * X[i * n + j] + bx;
      }
    X = Y;
  }
  std::vector<double> out(rows * cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) out[i * cols + j] = tall ? X[j * n + i] : X[i * n + j];
  return out;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = a.size() == b.size() ? 0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::fmax(d, std::fabs(a[i] - b[i]));
  return d;
}

}  // namespace shardrt::test
