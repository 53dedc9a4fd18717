// The Darcy pressure equation solved as written: -div(k grad p) = f on the unit square, p = 0 on its boundary.
//
// Discretisation: cell-centred finite volumes on an n x n grid of cells of side h = 1/n, cell (i, j) centred at
// ((i + 1/2) h, (j + 1/2) h) (i the x index, the row). The flux through a face between two cells uses the
// harmonic mean of their k (the exact flux of a 1-D two-layer medium, which keeps the jump of k at an interface
// sharp); through a boundary face it runs from the cell centre to the wall, h/2 away, where p = 0. Each cell's
// balance, multiplied by h^2/h^2 = 1, reads  sum_faces T_f (p_C - p_nb) = h^2 f_C  with T_f = harmonic mean
// (interior) or 2 k_C (boundary): a symmetric positive definite 5-point system, second order for smooth k and p.
// It is solved by Eigen's conjugate gradient (Jacobi preconditioner) until ||b - A p|| / ||b|| <= tolerance.
#pragma once
#include <cstdint>
#include <vector>

namespace shardrt::data {

struct ExactSolve {
  std::vector<double> pressure;  // n x n, row-major
  int64_t iterations = 0;
  double relative_residual = 0;  // ||b - A p|| / ||b||, recomputed from the solution
};

// `k` and `f` hold n x n cell values (row-major). ValueError for sizes that do not fit, a k that is not positive,
// or a solve that does not reach `tolerance` within `max_iterations` (naming both and the residual reached).
ExactSolve solve_darcy_exact(int64_t n, const std::vector<double>& k, const std::vector<double>& f, double tolerance,
                             int64_t max_iterations);

// The discrete operator applied to p without assembling a matrix: (A p)_C = sum_faces T_f (p_C - p_nb), the same
// h^2-scaled balance the solver's matrix holds. Tests use it to check a solution's residual independently of Eigen.
std::vector<double> apply_darcy_operator(int64_t n, const std::vector<double>& k, const std::vector<double>& p);

}  // namespace shardrt::data
