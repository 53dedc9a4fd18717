// Cell-centred finite volumes for -div(k grad p) = f with p = 0 on the boundary, solved by Eigen's CG.
#include "data/darcy_exact.h"

#include <Eigen/IterativeLinearSolvers>
#include <Eigen/SparseCore>
#include <algorithm>
#include <cmath>

#include "runtime/errors.h"

namespace shardrt::data {
namespace {

void check_fields(const char* op, int64_t n, const std::vector<double>& k, size_t other, const char* other_name) {
  SHARDRT_CHECK(n > 0, ValueError, op, ": the grid size must be positive, got ", n);
  const size_t cells = static_cast<size_t>(n * n);
  SHARDRT_CHECK(k.size() == cells && other == cells, ValueError, op, ": k has ", k.size(), " values and ",
                other_name, " ", other, ", expected n*n = ", cells, " for n = ", n);
  for (double v : k)
    SHARDRT_CHECK(v > 0 && std::isfinite(v), ValueError, op, ": the permeability must be positive and finite, got ",
                  v);
}

// Transmissibility of the face between two cells (the harmonic mean of their k), and of a boundary face (from the
// centre to the wall at h/2).
inline double face(double a, double b) { return 2.0 * a * b / (a + b); }
inline double wall(double a) { return 2.0 * a; }

// Calls visit(neighbour index or -1 for the wall, transmissibility) for the four faces of cell (i, j).
template <typename Visit>
void for_each_face(int64_t n, const std::vector<double>& k, int64_t i, int64_t j, Visit&& visit) {
  const double kc = k[static_cast<size_t>(i * n + j)];
  const int64_t di[4] = {-1, 1, 0, 0}, dj[4] = {0, 0, -1, 1};
  for (int f = 0; f < 4; ++f) {
    const int64_t a = i + di[f], b = j + dj[f];
    if (a < 0 || b < 0 || a >= n || b >= n)
      visit(int64_t{-1}, wall(kc));
    else
      visit(a * n + b, face(kc, k[static_cast<size_t>(a * n + b)]));
  }
}

}  // namespace

std::vector<double> apply_darcy_operator(int64_t n, const std::vector<double>& k, const std::vector<double>& p) {
  check_fields("apply_darcy_operator", n, k, p.size(), "p");
  std::vector<double> out(p.size(), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double pc = p[static_cast<size_t>(i * n + j)];
      double sum = 0;
      for_each_face(n, k, i, j, [&](int64_t nb, double t) { sum += t * (pc - (nb < 0 ? 0.0 : p[static_cast<size_t>(nb)])); });
      out[static_cast<size_t>(i * n + j)] = sum;
    }
  return out;
}

ExactSolve solve_darcy_exact(int64_t n, const std::vector<double>& k, const std::vector<double>& f, double tolerance,
                             int64_t max_iterations) {
  check_fields("solve_darcy_exact", n, k, f.size(), "f");
  SHARDRT_CHECK(tolerance > 0 && tolerance < 1, ValueError, "solve_darcy_exact: the relative tolerance must lie in (0, 1), got ",
                tolerance);
  SHARDRT_CHECK(max_iterations > 0, ValueError, "solve_darcy_exact: max_iterations must be positive, got ", max_iterations);
  using SpMat = Eigen::SparseMatrix<double>;
  const int64_t cells = n * n;
  std::vector<Eigen::Triplet<double>> entries;
  entries.reserve(static_cast<size_t>(cells * 5));
  Eigen::VectorXd b(cells);
  const double h2 = 1.0 / static_cast<double>(n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t c = i * n + j;
      double diag = 0;
      for_each_face(n, k, i, j, [&](int64_t nb, double t) {
        diag += t;
        if (nb >= 0) entries.emplace_back(c, nb, -t);
      });
      entries.emplace_back(c, c, diag);
      b[c] = h2 * f[static_cast<size_t>(c)];
    }
  SpMat A(cells, cells);
  A.setFromTriplets(entries.begin(), entries.end());

  Eigen::ConjugateGradient<SpMat, Eigen::Lower | Eigen::Upper> cg;
  cg.setTolerance(tolerance);
  cg.setMaxIterations(static_cast<Eigen::Index>(max_iterations));
  cg.compute(A);
  Eigen::VectorXd p = cg.solve(b);
  ExactSolve out;
  out.iterations = cg.iterations();
  const double bnorm = b.norm();
  auto true_residual = [&] { return bnorm > 0 ? (b - A * p).norm() / bnorm : (A * p).norm(); };
  out.relative_residual = true_residual();
  // CG's recursively updated residual drifts from the true one; the stated tolerance is about the true residual,
  // so the solve restarts from where it stopped until that is met (rarely more than once).
  while (out.relative_residual > tolerance && cg.info() == Eigen::Success && out.iterations < max_iterations) {
    p = cg.solveWithGuess(b, p);
    out.iterations += std::max<int64_t>(cg.iterations(), 1);
    out.relative_residual = true_residual();
  }
  SHARDRT_CHECK(out.relative_residual <= tolerance, ValueError, "solve_darcy_exact: conjugate gradient on the ", n,
                " x ", n, " grid reached relative residual ", out.relative_residual, " after ", out.iterations,
                " iterations, above the tolerance ", tolerance, " (max_iterations ", max_iterations,
                "); raise max_cg_iterations or loosen relative_tolerance");
  out.pressure.assign(p.data(), p.data() + cells);
  return out;
}

}  // namespace shardrt::data
