// Test inputs and comparisons shared by every suite: seeded random vectors, casts between the kernel's type and
// the fp64 reference, the elementwise closeness checks and the finite-difference gradient checks.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <type_traits>
#include <vector>

namespace shardrt::test {

using Vec = std::vector<double>;
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- inputs -------------------------------------------------------------------------------------------------

inline Vec random_vec(int64_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(static_cast<size_t>(n));
  for (double& e : v) e = dist(gen);
  return v;
}

// Uniform in [-1, 1].
inline Vec random_vec(int64_t n, uint64_t seed) { return random_vec(n, -1.0, 1.0, seed); }

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

template <typename T>
Vec widen(const std::vector<T>& v) {
  return Vec(v.begin(), v.end());
}

// The values rounded to T and back: the exact inputs a kernel in T sees, for the fp64 reference.
template <typename T>
Vec rounded(const Vec& v) {
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<double>(static_cast<T>(v[i]));
  return out;
}

inline double dot(const Vec& a, const Vec& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

// ---- closeness ----------------------------------------------------------------------------------------------

// Element i passes when both are NaN, both are the same value (infinities included) or
// |got - want| <= atol + rtol * |want|. Counts every failure and reports the first, so one CHECK covers a vector.
template <typename T>
void expect_close(const std::vector<T>& got, const Vec& want, double rtol, double atol = 0.0) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  std::ostringstream first;
  first.precision(17);
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double w = want[i];
    const bool ok = (std::isnan(g) && std::isnan(w)) || g == w || std::abs(g - w) <= atol + rtol * std::abs(w);
    if (!ok && bad++ == 0) first << "index " << i << ": got " << g << ", want " << w;
  }
  INFO(bad << " of " << want.size() << " mismatches; first at " << first.str());
  CHECK(bad == 0);
}

// |got - want| <= tol * (1 + |want|) everywhere (NaN matches NaN), stopping the test case on failure; reports
// the worst element. A relative tolerance with the same absolute floor, for values of order one.
template <typename T>
void require_close(const std::vector<T>& got, const Vec& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t worst_at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    if (std::isnan(g) && std::isnan(want[i])) continue;
    const double err = g == want[i] ? 0.0 : std::abs(g - want[i]) / (1.0 + std::abs(want[i]));
    if (!(err <= worst)) {
      worst = std::isnan(err) ? kInf : err;
      worst_at = i;
    }
  }
  INFO("worst at element " << worst_at << ": got " << (got.empty() ? 0.0 : double(got[worst_at])) << ", want "
                           << (want.empty() ? 0.0 : want[worst_at]));
  REQUIRE(worst <= tol);
}

// Relative tolerance of a kernel in T that rounds a few times, against the fp64 reference.
template <typename T>
double tol() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}

// ---- finite differences -------------------------------------------------------------------------------------

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

// Central differences of loss() in each coordinate of x (an evenly spread subset of at most max_probes when x is
// large) against the analytic gradient. The gradient must not be identically zero, so the check cannot pass
// vacuously.
inline void check_gradient(Vec& x, const Vec& grad, const std::function<double()>& loss, size_t max_probes = 150) {
  REQUIRE(x.size() == grad.size());
  REQUIRE(std::any_of(grad.begin(), grad.end(), [](double g) { return g != 0.0; }));
  const double eps = 1e-6;
  const size_t step = std::max<size_t>(1, x.size() / max_probes);
  double worst = 0, worst_fd = 0;
  size_t worst_at = 0;
  for (size_t i = step / 2; i < x.size(); i += step) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double up = loss();
    x[i] = saved - eps;
    const double down = loss();
    x[i] = saved;
    const double fd = (up - down) / (2 * eps);
    const double err = std::abs(fd - grad[i]) / (1.0 + std::abs(grad[i]));
    if (!(err <= worst)) {
      worst = std::isnan(err) ? kInf : err;
      worst_at = i;
      worst_fd = fd;
    }
  }
  INFO("coordinate " << worst_at << ": analytic " << grad[worst_at] << ", finite difference " << worst_fd);
  REQUIRE(worst <= 1e-6);
}

}  // namespace shardrt::test
