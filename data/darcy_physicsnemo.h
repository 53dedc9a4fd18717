// PhysicsNeMo's Darcy2D pressure solve, reproduced with its quirks so that data made here compares with data (and
// published errors) made there. Read physicsnemo/datapipes/benchmarks/darcy.py and kernels/finite_difference.py,
// kernels/utils.py for the original; what it does, in words:
//
// * The grid is (R+1) x (R+1) with spacing dx = 1/(R+1); p is zero just outside it (indices -1 and R+1).
// * Levels r = 2^(L-1), ..., 2, 1. Level r updates only the points (r*x + r-1, r*y + r-1), x, y < R/r (at r = 1
//   every point), with spacing h = r*dx and neighbours at +-r, by the Jacobi sweep
//       p_C <- (k_C (p_W + p_E + p_S + p_N)/h^2 + (k_E - k_W)(p_E - p_W)/(2h) + (k_N - k_S)(p_N - p_S)/(2h) + 1)
//              / (4 k_C / h^2)
//   with k read clamped to the grid. The cross terms are divided by 2h where a central difference of
//   grad k . grad p has 4h^2: the equation solved is k lap p + 2h grad k . grad p = -1, not div(k grad p) = -1.
// * Two buffers, swapped after every sweep. Every `iterations_per_convergence_check` sweeps the largest change of
//   the last sweep over the level's points is compared with threshold * r; a level stops below it or after
//   max_iterations sweeps.
// * Between levels the newest buffer is "bilinearly" upsampled in place, point by point in row-major order (Warp's
//   CPU launch order), with its formula x0 = x - (x+1)%r, x1 = x + (x+1)%r, weight ((x - x0)/r): exact midpoints at
//   r = 2, reads of stale or just-overwritten points at r >= 4. Only the initial guess of the next level depends
//   on it.
// * The output is the newest buffer cropped to [0, R) x [0, R) (the last row and column dropped), so the zero
//   boundary sits one cell beyond index 0 and two beyond index R-1.
//
// One deliberate difference: at levels r >= 4 the +r neighbour of the last level point lies beyond the grid,
// where Warp reads whatever memory follows (the next sample of the batch, or past the array); here it reads 0,
// which keeps every sample independent of its batch. That only changes coarse-level initial guesses.
#pragma once
#include <cstdint>
#include <vector>

#include "data/darcy_generator.h"

namespace shardrt::data {

struct PhysicsnemoSolve {
  std::vector<float> pressure;  // (R+1) x (R+1), row-major
  int64_t sweeps = 0;           // over all levels
  double last_change = 0;       // the finest level's last inf-norm sweep change
};

// `permeability` is the (R+1) x (R+1) grid of darcy_permeability_grid. ValueError when the config does not fit
// (R not a multiple of 2^(nr_multigrids-1)) or the grid has the wrong size.
PhysicsnemoSolve solve_darcy_physicsnemo(const DarcyConfig& config, const std::vector<float>& permeability);

}  // namespace shardrt::data
