// The exact solver: its solutions meet the stated relative residual (checked with a matrix-free operator, not
// Eigen's own number), it converges at second order on a manufactured solution, and bad input is a typed error.
#include <catch2/catch.hpp>
#include <cmath>

#include "data/darcy_exact.h"
#include "data/darcy_generator.h"
#include "runtime/errors.h"

using namespace shardrt;
using namespace shardrt::data;

namespace {

constexpr double kPi = 3.14159265358979323846;

// p* = sin(pi x) sin(pi y) (zero on the boundary), k = 1 + x y; f = -div(k grad p*).
double k_of(double x, double y) { return 1.0 + x * y; }
double p_of(double x, double y) { return std::sin(kPi * x) * std::sin(kPi * y); }
double f_of(double x, double y) {
  const double s = std::sin(kPi * x) * std::sin(kPi * y);
  const double px = kPi * std::cos(kPi * x) * std::sin(kPi * y), py = kPi * std::sin(kPi * x) * std::cos(kPi * y);
  return -(-(k_of(x, y)) * 2 * kPi * kPi * s + y * px + x * py);
}

double max_error(int64_t n) {
  std::vector<double> k(static_cast<size_t>(n * n)), f(k.size()), exact(k.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double x = (i + 0.5) / n, y = (j + 0.5) / n;
      const size_t c = static_cast<size_t>(i * n + j);
      k[c] = k_of(x, y), f[c] = f_of(x, y), exact[c] = p_of(x, y);
    }
  const ExactSolve s = solve_darcy_exact(n, k, f, 1e-12, 100000);
  double e = 0;
  for (size_t c = 0; c < k.size(); ++c) e = std::max(e, std::fabs(s.pressure[c] - exact[c]));
  return e;
}

double relative_residual(int64_t n, const std::vector<double>& k, const std::vector<double>& f,
                         const std::vector<double>& p) {
  const std::vector<double> Ap = apply_darcy_operator(n, k, p);
  const double h2 = 1.0 / static_cast<double>(n * n);
  double num = 0, den = 0;
  for (size_t c = 0; c < Ap.size(); ++c) {
    const double b = h2 * f[c];
    num += (b - Ap[c]) * (b - Ap[c]), den += b * b;
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("exact Darcy: second-order convergence on a manufactured solution", "[data][exact]") {
  const double e16 = max_error(16), e32 = max_error(32), e64 = max_error(64);
  const double order1 = std::log2(e16 / e32), order2 = std::log2(e32 / e64);
  INFO("max errors " << e16 << " " << e32 << " " << e64 << ", orders " << order1 << " " << order2);
  CHECK(e64 < 2e-3);
  CHECK(order1 > 1.8);
  CHECK(order2 > 1.9);
  CHECK(order2 < 2.2);  // second order, not an accident of cancellation
}

TEST_CASE("exact Darcy: a generated sample meets its stated relative residual", "[data][exact]") {
  for (double tol : {1e-6, 1e-10}) {
    DarcyConfig c;
    c.mode = DarcyMode::exact;
    c.resolution = 24;
    c.seed = 3;
    c.relative_tolerance = tol;
    const DarcySample s = generate_darcy_sample(c, 5);
    const std::vector<double> k(s.permeability.begin(), s.permeability.end()), f(k.size(), 1.0);
    // The stored f32 pressure rounds the f64 solution (relative 6e-8), so the residual of what was stored is
    // bounded by the tolerance plus that rounding times the operator's condition.
    const ExactSolve direct = solve_darcy_exact(24, k, f, tol, 100000);
    CHECK(relative_residual(24, k, f, direct.pressure) <= tol);
    CHECK(s.solver_residual <= tol);
    CHECK(s.solver_iterations > 10);
    for (size_t i = 0; i < k.size(); ++i) CHECK(std::fabs(s.darcy[i] - static_cast<float>(direct.pressure[i])) == 0);
    // -div(k grad p) = 1 > 0 with p = 0 on the boundary: p > 0 inside (maximum principle).
    for (float v : s.darcy) CHECK(v > 0);
  }
}

TEST_CASE("exact Darcy: bad input is a ValueError naming the problem", "[data][exact]") {
  const std::vector<double> k(16, 1.0), f(16, 1.0);
  CHECK_THROWS_WITH(solve_darcy_exact(4, std::vector<double>(15, 1.0), f, 1e-8, 100),
                    Catch::Contains("solve_darcy_exact") && Catch::Contains("expected n*n = 16"));
  CHECK_THROWS_WITH(solve_darcy_exact(4, std::vector<double>(16, -1.0), f, 1e-8, 100),
                    Catch::Contains("positive"));
  CHECK_THROWS_AS(solve_darcy_exact(4, k, f, 2.0, 100), ValueError);
  // Two iterations cannot reach 1e-12 on a 32 x 32 grid.
  const std::vector<double> k32(32 * 32, 1.0), f32(32 * 32, 1.0);
  CHECK_THROWS_WITH(solve_darcy_exact(32, k32, f32, 1e-12, 2),
                    Catch::Contains("above the tolerance") && Catch::Contains("max_cg_iterations"));
}
