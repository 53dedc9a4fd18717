// The exact rules every block search of kernels/cpu/neighbor_search.h shares (brute force, KD-tree, cell grid): the
// one squared distance, the admission of a candidate into a query's list, the list's bound, and the box lower bound
// that lets an index skip points. Internal to the neighbour search.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace shardrt::kernels::cpu::neighbor_rules {

using List = std::vector<std::pair<double, int64_t>>;

// The one squared distance every path uses: differences summed in dim order, in f64.
inline double dist2(const double* a, const double* b, int64_t d) {
  double s = 0;
  for (int64_t c = 0; c < d; ++c) {
    const double diff = a[c] - b[c];
    s += diff * diff;
  }
  return s;
}

// Inserts (d2, index) when it belongs among the k best with d2 <= radius2.
inline void offer(List& list, double d2, int64_t index, int64_t k, double radius2) {
  if (!(d2 <= radius2)) return;
  const std::pair<double, int64_t> cand{d2, index};
  if (static_cast<int64_t>(list.size()) == k && !(cand < list.back())) return;
  list.insert(std::upper_bound(list.begin(), list.end(), cand), cand);
  if (static_cast<int64_t>(list.size()) > k) list.pop_back();
}

// No point farther than this can enter the list (ties at it can, by index).
inline double bound(const List& list, int64_t k, double radius2) {
  return static_cast<int64_t>(list.size()) == k ? std::min(radius2, list.back().first) : radius2;
}

// Squared distance from q to the box [lo, hi]: a lower bound of dist2(q, p) for every p in the box, also in
// floating point (each gap is at most |q_c - p_c| after rounding, squares and the in-order sum are monotone).
inline double box_dist2(const double* q, const double* lo, const double* hi, int64_t d) {
  double s = 0;
  for (int64_t c = 0; c < d; ++c) {
    const double gap = q[c] < lo[c] ? lo[c] - q[c] : (q[c] > hi[c] ? q[c] - hi[c] : 0.0);
    s += gap * gap;
  }
  return s;
}

}  // namespace shardrt::kernels::cpu::neighbor_rules
