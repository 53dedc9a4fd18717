// A uniform grid (cell list) over one block of points, the index of kernels/cpu/neighbor_search.h's
// merge_block_indexed: the block's points sorted by cell, a few per cell (more for larger k), over its first three
// dims.
//
// A query visits its own cell, then the shells of cells around it (Chebyshev distance 1, 2, ...), skipping every
// cell whose box is farther than the query's bound (radius2, or the k-th best distance once its list is full) and
// stopping once no unvisited cell can hold a point within the bound. A shell's points within the bound are merged
// into the list by the exact rule of neighbor_search.h (the k smallest (d2, index) pairs with d2 <= radius2: one
// set whatever the order), so the lists are the brute force's, bit for bit; the grid only decides
// what is looked at, through lower bounds that are padded against rounding (a cell's box is widened by a few ulps
// of the block's extent, and a query outside the grid is first projected onto it: its distance to any point of the
// grid is at least the projection's distance plus the distance from the projection to that point).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace shardrt::kernels::cpu {

class CellGrid {
 public:
  // pts: n x d (d >= 1), row-major; global index of point j is offset + j; k: the list length the searches keep
  // (sizes the cells). Copies what it needs.
  CellGrid(const double* pts, int64_t n, int64_t d, int64_t offset, int64_t k);

  // Offers to `list` (sorted (d2, index) pairs, at most k) every point of the block that could enter it.
  void search(std::vector<std::pair<double, int64_t>>& list, const double* q, int64_t k, double radius2) const;
  // The cell q falls in (clamped to the grid): queries searched in this order share cells in cache.
  int64_t home_cell(const double* q) const;

 private:
  int64_t cell_of(int c, double x) const;
  // Distance along grid dim c from q to cell i's padded interval (0 inside it, and on dims past the grid's).
  double gap_along(int c, int64_t i, const double* q) const;
  // Appends to `found` the points of cell (i0, i1, i2) within the bound b (squared), when the cell's padded box is.
  void visit(std::vector<std::pair<double, int64_t>>& found, const double* q, const int64_t* cell, double b) const;

  int64_t d_, gd_;                  // point dims, grid dims (min(d, 3))
  double lo_[3], h_[3], pad_;       // grid origin, cell size per dim, box padding against rounding
  int64_t cells_[3];                // cells per grid dim (1 on unused dims)
  std::vector<int64_t> start_;      // points of cell c: [start_[c], start_[c + 1]) of the sorted arrays
  std::vector<double> pts_;         // the points in cell order
  std::vector<int64_t> index_;      // their global indices
};

}  // namespace shardrt::kernels::cpu
