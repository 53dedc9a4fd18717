// The cell grid of the block search (see neighbor_grid.h).
#include "kernels/cpu/neighbor_grid.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/neighbor_rules.h"

namespace shardrt::kernels::cpu {

using namespace neighbor_rules;

namespace {

// Points per cell on average, k / 4 within [4, 16]: smaller cells look at fewer points past the k-th neighbour's
// distance, larger ones make fewer cells to test. Measured (AVX2, 10^5 queries in 2 10^4 uniform points and back,
// as geo_local's searches): 4 per cell best at k = 8, 8 at k = 32; 2 and 16 per cell 20-40% slower.
double points_per_cell(int64_t k) { return std::clamp(static_cast<double>(k) / 4.0, 4.0, 16.0); }
constexpr int64_t kMaxCellsPerDim = int64_t(1) << 20;

// The bound widened by the relative margin the KD-tree uses: a point at the bound, or a hair past it by the lower
// bounds' rounding, is still looked at; offer() decides exactly.
double widened(double b) { return std::isinf(b) ? b : b * (1 + 1e-12) + std::numeric_limits<double>::min(); }

// dist2 for d = 3, the same sum in the same order.
inline double dist2_3(const double* a, const double* b) {
  const double x = a[0] - b[0], y = a[1] - b[1], z = a[2] - b[2];
  double s = 0;
  s += x * x;
  s += y * y;
  s += z * z;
  return s;
}

// list = the k smallest of list and found admitted by offer()'s rule (d2 <= radius2; (d2, index) pairs are
// distinct, so the k smallest are one set whatever the order they arrive in), sorted; returns the new bound.
// found's entries are within a widened bound: the exact test is here.
double merge(std::vector<std::pair<double, int64_t>>& list, std::vector<std::pair<double, int64_t>>& found,
             int64_t k, double radius2) {
  found.erase(std::remove_if(found.begin(), found.end(), [&](const auto& e) { return !(e.first <= radius2); }),
              found.end());
  found.insert(found.end(), list.begin(), list.end());
  if (static_cast<int64_t>(found.size()) > k) {
    std::nth_element(found.begin(), found.begin() + (k - 1), found.end());
    found.resize(static_cast<size_t>(k));
  }
  std::sort(found.begin(), found.end());
  list.assign(found.begin(), found.end());
  return bound(list, k, radius2);
}

}  // namespace

CellGrid::CellGrid(const double* pts, int64_t n, int64_t d, int64_t offset, int64_t k)
    : d_(d), gd_(std::min<int64_t>(d, 3)) {
  double hi[3] = {0, 0, 0};
  for (int c = 0; c < 3; ++c) lo_[c] = 0, h_[c] = 1, cells_[c] = 1;
  for (int c = 0; c < gd_; ++c) {
    lo_[c] = std::numeric_limits<double>::infinity(), hi[c] = -lo_[c];
    for (int64_t j = 0; j < n; ++j) lo_[c] = std::min(lo_[c], pts[j * d + c]), hi[c] = std::max(hi[c], pts[j * d + c]);
    if (!(lo_[c] <= hi[c])) lo_[c] = hi[c] = 0;  // no finite coordinate on this dim
  }
  // Cell size h from the volume of the dims with extent and the cell count; a dim narrower than h gets one cell.
  const double target = std::max(1.0, static_cast<double>(n) / points_per_cell(k));
  bool wide[3] = {false, false, false};
  for (int c = 0; c < gd_; ++c) wide[c] = hi[c] > lo_[c];
  double h = 0;
  for (int round = 0; round < 3; ++round) {
    double volume = 1;
    int dims = 0;
    for (int c = 0; c < gd_; ++c)
      if (wide[c]) volume *= hi[c] - lo_[c], ++dims;
    if (dims == 0) break;
    h = std::pow(volume / target, 1.0 / dims);
    bool changed = false;
    for (int c = 0; c < gd_; ++c)
      if (wide[c] && hi[c] - lo_[c] < h) wide[c] = false, changed = true;
    if (!changed) break;
  }
  double span = 0;
  for (int c = 0; c < gd_; ++c) {
    const double e = hi[c] - lo_[c];
    span = std::max(span, std::abs(lo_[c]) + e);
    if (!wide[c] || !(h > 0)) {
      h_[c] = e > 0 ? e : 1;  // one cell spanning the dim (any width holds a zero extent)
      continue;
    }
    cells_[c] = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(e / h)), 1, kMaxCellsPerDim);
    h_[c] = e / static_cast<double>(cells_[c]);
  }
  // A few ulps of the block's coordinates: cell faces and point-to-cell assignment may round differently.
  pad_ = 16 * std::numeric_limits<double>::epsilon() * span + std::numeric_limits<double>::min();

  // Counting sort of the points by cell (row-major over the grid dims).
  const int64_t total = cells_[0] * cells_[1] * cells_[2];
  std::vector<int64_t> cell(static_cast<size_t>(n));
  start_.assign(static_cast<size_t>(total + 1), 0);
  for (int64_t j = 0; j < n; ++j) {
    int64_t id = 0;
    for (int c = 0; c < 3; ++c) id = id * cells_[c] + (c < gd_ ? cell_of(c, pts[j * d + c]) : 0);
    cell[j] = id;
    ++start_[id + 1];
  }
  for (int64_t c = 0; c < total; ++c) start_[c + 1] += start_[c];
  std::vector<int64_t> fill(start_.begin(), start_.end() - 1);
  pts_.resize(static_cast<size_t>(n * d));
  index_.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = fill[cell[j]]++;
    std::copy(pts + j * d, pts + (j + 1) * d, pts_.begin() + at * d);
    index_[at] = offset + j;
  }
}

double CellGrid::gap_along(int c, int64_t i, const double* q) const {
  if (c >= gd_) return 0;
  const double lo = lo_[c] + static_cast<double>(i) * h_[c] - pad_, hi = lo_[c] + static_cast<double>(i + 1) * h_[c] + pad_;
  return q[c] < lo ? lo - q[c] : q[c] > hi ? q[c] - hi : 0.0;
}

int64_t CellGrid::home_cell(const double* q) const {
  int64_t id = 0;
  for (int c = 0; c < 3; ++c) id = id * cells_[c] + (c < gd_ ? cell_of(c, q[c]) : 0);
  return id;
}

int64_t CellGrid::cell_of(int c, double x) const {
  const double t = (x - lo_[c]) / h_[c];
  if (!(t >= 0)) return 0;  // below the grid, or NaN
  if (t >= static_cast<double>(cells_[c])) return cells_[c] - 1;
  return std::min(static_cast<int64_t>(t), cells_[c] - 1);
}

void CellGrid::visit(std::vector<std::pair<double, int64_t>>& found, const double* q, const int64_t* cell,
                     double b) const {
  double box_lo[3], box_hi[3];
  for (int c = 0; c < gd_; ++c) {
    box_lo[c] = lo_[c] + static_cast<double>(cell[c]) * h_[c] - pad_;
    box_hi[c] = lo_[c] + static_cast<double>(cell[c] + 1) * h_[c] + pad_;
  }
  if (box_dist2(q, box_lo, box_hi, gd_) > b) return;
  const int64_t id = (cell[0] * cells_[1] + cell[1]) * cells_[2] + cell[2];
  const double* p = pts_.data() + start_[id] * d_;
  for (int64_t j = start_[id]; j < start_[id + 1]; ++j, p += d_) {
    const double d2 = d_ == 3 ? dist2_3(q, p) : dist2(q, p, d_);
    if (d2 <= b) found.push_back({d2, index_[j]});
  }
}

void CellGrid::search(std::vector<std::pair<double, int64_t>>& list, const double* q, int64_t k,
                      double radius2) const {
  thread_local std::vector<std::pair<double, int64_t>> found;
  // The query projected onto the grid's box (p), the squared distance it moved (out2), and its cell.
  double p[3] = {0, 0, 0}, out2 = 0;
  int64_t home[3] = {0, 0, 0}, reach = 0;
  for (int c = 0; c < gd_; ++c) {
    const double top = lo_[c] + static_cast<double>(cells_[c]) * h_[c];
    p[c] = std::clamp(q[c], lo_[c], std::max(lo_[c], top));
    out2 += (q[c] - p[c]) * (q[c] - p[c]);
    home[c] = cell_of(c, p[c]);
    reach = std::max({reach, home[c], cells_[c] - 1 - home[c]});
  }
  double b = bound(list, k, radius2);
  for (int64_t s = 0; s <= reach; ++s) {
    if (s > 0) {
      // Every unvisited point lies outside the cells within s - 1 of home: at least the distance from p to the
      // nearest face of that box that has cells beyond it, in some dim, plus out2.
      double gap = std::numeric_limits<double>::infinity();
      for (int c = 0; c < gd_; ++c) {
        if (home[c] - (s - 1) > 0) gap = std::min(gap, p[c] - (lo_[c] + static_cast<double>(home[c] - s + 1) * h_[c]));
        if (home[c] + (s - 1) < cells_[c] - 1)
          gap = std::min(gap, lo_[c] + static_cast<double>(home[c] + s) * h_[c] - p[c]);
      }
      gap = std::max(0.0, gap - pad_);
      if (std::isinf(gap) || out2 + gap * gap > widened(b)) return;
    }
    // The shell: cells at Chebyshev distance exactly s from home, clipped to the grid.
    int64_t lo[3], hi[3];
    for (int c = 0; c < 3; ++c) lo[c] = std::max<int64_t>(home[c] - s, 0), hi[c] = std::min(home[c] + s, cells_[c] - 1);
    // Candidates within the bound as it stood when the shell began, merged into the list after it. Rows of cells
    // beyond the bound in dims 0 and 1 are skipped whole, and along dim 2 only the cells within reach of what is
    // left of the bound are looked at (one cell of margin against cell_of's rounding; visit tests each box).
    found.clear();
    const double wb = widened(b);
    int64_t cell[3];
    for (cell[0] = lo[0]; cell[0] <= hi[0]; ++cell[0]) {
      const double g0 = gap_along(0, cell[0], q);
      if (g0 * g0 > wb) continue;
      for (cell[1] = lo[1]; cell[1] <= hi[1]; ++cell[1]) {
        const double g1 = gap_along(1, cell[1], q), rest = wb - g0 * g0 - g1 * g1;
        if (rest < 0) continue;
        int64_t z_lo = 0, z_hi = cells_[2] - 1;
        if (gd_ == 3 && !std::isinf(rest)) {
          const double r = std::sqrt(rest) + pad_;
          z_lo = std::max<int64_t>(cell_of(2, q[2] - r) - 1, 0);
          z_hi = std::min(cell_of(2, q[2] + r) + 1, cells_[2] - 1);
        }
        if (std::abs(cell[0] - home[0]) == s || std::abs(cell[1] - home[1]) == s) {
          for (cell[2] = std::max(lo[2], z_lo); cell[2] <= std::min(hi[2], z_hi); ++cell[2]) visit(found, q, cell, wb);
          continue;
        }
        // Inside the shell's faces in dims 0 and 1, only the two cells at home[2] -+ s belong to it.
        for (const int64_t c2 : {home[2] - s, home[2] + s}) {
          if (c2 < std::max<int64_t>(z_lo, 0) || c2 > std::min(z_hi, cells_[2] - 1)) continue;
          cell[2] = c2;
          visit(found, q, cell, wb);
        }
      }
    }
    if (!found.empty()) b = merge(list, found, k, radius2);
  }
}

}  // namespace shardrt::kernels::cpu
