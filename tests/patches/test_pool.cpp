// Sharded pooling with any stride and even kernels (patches/pool.cpp, "start ownership"): avg and max against the
// serial fp64 oracle for k3 s2 p1, k2 s1 p0, k4 s2 p1 and k2 s2 on 1-D meshes (uneven extents, a zero-size
// shard, shards thinner than the halo), 2-D and 3-D inputs, and the 2x2 mesh sharding two spatial dims; every
// case with its exact collectives. The expected ledger is derived here output by output (who owns the window
// starting at i*s - p, which slices that window reads), not from the patch's plan.
#include <algorithm>

#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

ShardedFn one(std::function<ShardTensor(const ShardTensor&)> f) {
  return [f](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{f(in[0])};
  };
}

struct PoolCfg {
  std::string name;
  int64_t k, s, p;
};

const std::vector<PoolCfg> kConfigs = {{"k3 s2 p1", 3, 2, 1}, {"k2 s1 p0", 2, 1, 0}, {"k4 s2 p1", 4, 2, 1},
                                       {"k2 s2 p0", 2, 2, 0}};

// One dim's windows, output by output: coordinate j owns output i when i*s - p falls in its slices (below 0: the
// first coordinate; from L on: the last); its window spans its first window's start to its last window's end.
struct Windows {
  std::vector<int64_t> off, lo, hi;  // off[j]: offset; [lo[j], hi[j]): window, empty when it owns no output
  bool general = false;
  bool any_width = false;
};

Windows windows_of(const Extents& e, int64_t k, int64_t s, int64_t p) {
  const int n = static_cast<int>(e.size());
  Windows w;
  int64_t len = 0;
  for (int64_t x : e) {
    w.off.push_back(len);
    len += x;
  }
  w.lo.assign(n, 0);
  w.hi.assign(n, 0);
  std::vector<bool> owns(n, false);
  const int64_t outs = (len + 2 * p - k) / s + 1;
  for (int64_t i = 0; i < outs; ++i) {
    const int64_t start = i * s - p;
    int j = start < 0 ? 0 : n - 1;
    for (int c = 0; c < n && start >= 0; ++c)
      if (w.off[c] <= start && start < w.off[c] + e[c]) j = c;
    if (!owns[j]) w.lo[j] = start;
    owns[j] = true;
    w.hi[j] = start + k;
  }
  for (int j = 0; j < n; ++j) {
    const int64_t right = w.hi[j] - (w.off[j] + e[j]);
    if (!owns[j] || (j + 1 < n && right > e[j + 1])) w.general = true;
    if (owns[j] && (right > 0 || w.lo[j] < w.off[j])) w.any_width = true;
  }
  return w;
}

// The slices the dim's next exchange moves per index of the dim: the window's length for a coordinate with
// output, k for one without (its edge-filled window).
int64_t window_len(const Windows& w, int j, int64_t k) { return w.hi[j] > w.lo[j] ? w.hi[j] - w.lo[j] : k; }

int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

// The forward and backward lines of one sharded dim for coordinate r (slice: bytes of one index of the dim).
std::vector<ExpectedComm> dim_lines(const std::string& op, const std::string& axis, const Extents& e, int r,
                                    const PoolCfg& c, int64_t slice) {
  const int n = static_cast<int>(e.size());
  if (n == 1) return {};
  const Windows w = windows_of(e, c.k, c.s, c.p);
  if (w.general) {
    int64_t fwd = 0, bwd = 0;
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      fwd += overlap(w.off[r], w.off[r] + e[r], w.lo[j], w.hi[j]);
      bwd += overlap(w.off[j], w.off[j] + e[j], w.lo[r], w.hi[r]);
    }
    return {{op + ".forward", "all_to_all_v", axis, 1, fwd * slice},
            {op + ".backward", "all_to_all_v", axis, 1, bwd * slice}};
  }
  if (!w.any_width) return {};
  // Right halos only: r sends its first slices to r - 1 and gets the grads of its own right halo back from r + 1.
  const int64_t to_left = r > 0 ? std::max<int64_t>(0, w.hi[r - 1] - w.off[r]) : 0;
  const int64_t back = r + 1 < n ? std::max<int64_t>(0, w.hi[r] - w.off[r + 1]) : 0;
  return {{op + ".forward", "halo_exchange", axis, 1, to_left * slice},
          {op + ".backward", "halo_exchange", axis, 1, back * slice}};
}

ShardTensor run_pool(bool is_max, const ShardTensor& x, std::vector<int64_t> k, std::vector<int64_t> s,
                     std::vector<int64_t> p) {
  return is_max ? max_pool(x, k, s, p) : avg_pool(x, k, s, p);
}

// Shards of one slice first (thinner than every halo above), the rest on the last coordinate.
Extents thin_extents(int64_t len, int n) {
  Extents e(n, 1);
  e[n - 1] = len - (n - 1);
  return e;
}

}  // namespace

TEST_CASE("patch pool: any stride and even kernels on a 1-D mesh, by start ownership", "[patch][conv][pool]") {
  const Mesh& line = line_mesh();
  const int n = line.size(), r = line.rank();
  std::vector<ExtentsCase> cases = extents_cases(13, n);
  if (n >= 2) cases.push_back({"thin", thin_extents(13, n)});
  if (n >= 3) {
    Extents z = split_extents(13, n);  // the first coordinate empty: the padding's window comes from its neighbour
    z[n - 1] += z[0];
    z[0] = 0;
    cases.push_back({"zero-size first", z});
  }
  for (bool is_max : {false, true}) {
    const std::string op = is_max ? "max_pool" : "avg_pool";
    for (const PoolCfg& c : kConfigs)
      for (const ExtentsCase& e : cases) {
        ShardedCase sc = sharded_case(op + " 1-D " + c.name + " " + e.name, {rnd({2, 2, 13}, 300)},
                                      {on_line(S(2))}, {{e.extents}});
        check_patch(line, one([&](const ShardTensor& x) { return run_pool(is_max, x, {c.k}, {c.s}, {c.p}); }), sc,
                    dim_lines(op, "domain", e.extents, r, c, 2 * 2 * 8));
      }
  }
}

TEST_CASE("patch pool: strided 2-D and 3-D inputs sharded along one spatial dim", "[patch][conv][pool]") {
  const Mesh& line = line_mesh();
  const int n = line.size(), r = line.rank();
  for (bool is_max : {false, true}) {
    const std::string op = is_max ? "max_pool" : "avg_pool";
    for (const PoolCfg& c : kConfigs)
      for (const ExtentsCase& e : extents_cases(11, n)) {
        // 2-D: the unsharded W pools with its own k3 s1 p1.
        ShardedCase two = sharded_case(op + " 2-D " + c.name + " " + e.name, {rnd({1, 2, 11, 4}, 301)},
                                       {on_line(S(2))}, {{e.extents}});
        check_patch(line, one([&](const ShardTensor& x) { return run_pool(is_max, x, {c.k, 3}, {c.s, 1}, {c.p, 1}); }),
                    two, dim_lines(op, "domain", e.extents, r, c, 1 * 2 * 4 * 8));
        // 3-D, the middle dim sharded: the others k2 s2 and k3 s2 p1.
        ShardedCase three = sharded_case(op + " 3-D " + c.name + " " + e.name, {rnd({1, 1, 4, 11, 5}, 302)},
                                         {on_line(S(3))}, {{e.extents}});
        check_patch(line,
                    one([&](const ShardTensor& x) {
                      return run_pool(is_max, x, {2, c.k, 3}, {2, c.s, 2}, {0, c.p, 1});
                    }),
                    three, dim_lines(op, "domain", e.extents, r, c, 1 * 1 * 4 * 5 * 8));
      }
  }
}

TEST_CASE("patch pool: strided pooling over the 2x2 mesh sharding H and W", "[patch][conv][pool]") {
  if (!has_grid()) return;
  const Mesh& g = grid_mesh();
  const int cx = g.coord("dx"), cy = g.coord("dy");
  for (bool is_max : {false, true}) {
    const std::string op = is_max ? "max_pool" : "avg_pool";
    for (const PoolCfg& c : kConfigs)
      for (const AxisExtents& ext : grid_extents(9, 7)) {
        ShardedCase sc = sharded_case(op + " 2x2 " + c.name, {rnd({1, 2, 9, 7}, 303)}, {{S(2), S(3)}}, {ext});
        // H is exchanged first (its slices span the local W), then W (its slices span H's window).
        const Windows wh = windows_of(ext[0], c.k, c.s, c.p);
        std::vector<ExpectedComm> want = dim_lines(op, "dx", ext[0], cx, c, 2 * ext[1][cy] * 8);
        for (const ExpectedComm& l : dim_lines(op, "dy", ext[1], cy, c, 2 * window_len(wh, cx, c.k) * 8))
          want.push_back(l);
        check_patch(g, one([&](const ShardTensor& x) { return run_pool(is_max, x, {c.k}, {c.s}, {c.p}); }), sc, want);
      }
  }
}
