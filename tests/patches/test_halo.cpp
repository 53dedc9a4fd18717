// The general halo (patches/halo.cpp: halo_window, one all_to_all_v per direction on the axis) through the ops
// that take it, convolution and linear upsampling on shards thinner than the halo, zero-size ones included:
// against the serial fp64 oracle on 2-4 ranks and the 2x2 mesh, every parameter grad compared, and the exact
// all_to_all_v bytes, computed here from the extents.
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// The slices each coordinate of an axis reads for a stride-1 window of halo h and padding p over `e`: output i is
// centred on input c = i + h - p; coordinate j computes the centres it owns (the first also those before 0, the
// last those past the end) and reads [first - h, last + h] clipped to [0, L). Empty when it computes nothing.
struct Windows {
  std::vector<int64_t> off, lo, hi;
};
Windows windows(const Extents& e, int64_t h, int64_t p) {
  const int n = static_cast<int>(e.size());
  Windows w;
  int64_t len = 0;
  for (int64_t v : e) {
    w.off.push_back(len);
    len += v;
  }
  for (int j = 0; j < n; ++j) {
    const int64_t a = j == 0 ? h - p : std::max(w.off[j], h - p);
    const int64_t b = j == n - 1 ? len + p - h : std::min(w.off[j] + e[j], len + p - h);
    w.lo.push_back(b > a ? std::max<int64_t>(0, a - h) : 0);
    w.hi.push_back(b > a ? std::min(len, b + h) : 0);
  }
  return w;
}

// Slices coordinate `from` owns inside coordinate `to`'s window.
int64_t shared_slices(const Extents& e, const Windows& w, int from, int to) {
  const int64_t a = std::max(w.off[from], w.lo[to]), b = std::min(w.off[from] + e[from], w.hi[to]);
  return std::max<int64_t>(0, b - a);
}

// (forward, backward) bytes coordinate `r` sends in the general halo's all_to_all_v: forward its slices inside the
// others' windows, backward the grads of the others' slices inside its own window.
std::pair<int64_t, int64_t> a2a_bytes(const Extents& e, int64_t h, int64_t p, int r, int64_t slice) {
  const Windows w = windows(e, h, p);
  int64_t fwd = 0, bwd = 0;
  for (int j = 0; j < static_cast<int>(e.size()); ++j) {
    if (j == r) continue;
    fwd += shared_slices(e, w, r, j) * slice;
    bwd += shared_slices(e, w, j, r) * slice;
  }
  return {fwd, bwd};
}

std::vector<ExpectedComm> a2a_comms(const std::string& op, const std::string& axis, std::pair<int64_t, int64_t> b) {
  return {{op + ".forward", "all_to_all_v", axis, 1, b.first}, {op + ".backward", "all_to_all_v", axis, 1, b.second}};
}

// The halo lines of coordinate `r` for extents `e`: the general halo when some shard is thinner than the halo it
// serves (or than one slice) or an edge shard gets no output; else the neighbour exchange, h slices each way.
std::vector<ExpectedComm> halo_or_a2a(const std::string& op, const Extents& e, int64_t h, int64_t p,
                                      int r, int64_t slice) {
  const int n = static_cast<int>(e.size());
  bool general = false;
  for (int j = 0; j < n; ++j)
    general = general || e[j] < std::max<int64_t>(h, 1) || ((j == 0 || j == n - 1) && e[j] + p - h < 1);
  if (general) return a2a_comms(op, "domain", a2a_bytes(e, h, p, r, slice));
  const int64_t b = h * slice * ((r > 0 ? 1 : 0) + (r < n - 1 ? 1 : 0));
  return {{op + ".forward", "halo_exchange", "domain", 1, b}, {op + ".backward", "halo_exchange", "domain", 1, b}};
}

ShardedFn conv_fn(std::vector<int64_t> padding, std::vector<int64_t> dilation) {
  return [=](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    return std::vector<ShardTensor>{conv(in[0], p[0], p[1], {1}, padding, dilation)};
  };
}

// Thin extents of `len` on `n` >= 2 coordinates: 1, rest on 2; 1, 0, rest on 3; 4, 0, 1, rest on 4.
Extents thin_extents(int64_t len, int n) {
  if (n == 2) return {1, len - 1};
  if (n == 3) return {1, 0, len - 1};
  std::vector<int64_t> e = {4, 0, 1};
  int64_t left = len - 5;
  for (int j = 3; j < n; ++j) {
    e.push_back(j == n - 1 ? left : 2);
    left -= e.back();
  }
  return e;
}

}  // namespace

TEST_CASE("patch conv thin: conv1d/2d/3d on zero-size and thinner-than-halo shards (all_to_all_v)", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  if (p == 1) return;  // one rank splits nothing
  const std::vector<int64_t> e = thin_extents(11, p);
  struct Cfg {
    const char* name;
    int64_t k, pad, dil;
  };
  for (const Cfg& cfg : {Cfg{"k3 p1", 3, 1, 1}, Cfg{"k3 p2 d2", 3, 2, 2}, Cfg{"k5 p2", 5, 2, 1}, Cfg{"k5 p0", 5, 0, 1}}) {
    const int64_t h = cfg.dil * (cfg.k - 1) / 2;
    ShardedCase c = sharded_case(std::string("thin conv1d ") + cfg.name, {rnd({2, 3, 11}, 300)},
                                 {on_line(Placement::Shard(2))}, {{e}});
    c.params = {rnd({4, 3, cfg.k}, 301), rnd({4}, 302)};
    std::vector<ExpectedComm> want = halo_or_a2a("conv", e, h, cfg.pad, r, 2 * 3 * 8);
    want.push_back({"conv.backward", "all_reduce", "domain", 1, all_reduce_bytes(4 * 3 * cfg.k + 4, 8, p)});
    check_patch(line, conv_fn({cfg.pad}, {cfg.dil}), c, want);
  }
  // conv2d, H sharded thin (halo 2), W unsharded.
  ShardedCase c2 = sharded_case("thin conv2d k5 p2", {rnd({1, 2, 11, 4}, 303)}, {on_line(Placement::Shard(2))},
                                {{e}});
  c2.params = {rnd({3, 2, 5, 3}, 304), rnd({3}, 305)};
  std::vector<ExpectedComm> want = halo_or_a2a("conv", e, 2, 2, r, 2 * 4 * 8);
  want.push_back({"conv.backward", "all_reduce", "domain", 1, all_reduce_bytes(3 * 2 * 15 + 3, 8, p)});
  check_patch(line, conv_fn({2, 1}, {1}), c2, want);
  // conv3d, D sharded thin, kernel 3 with dilation 2 (halo 2), padding 2.
  ShardedCase c3 = sharded_case("thin conv3d k3 d2 p2", {rnd({1, 2, 11, 3, 2}, 308)}, {on_line(Placement::Shard(2))},
                                {{e}});
  c3.params = {rnd({2, 2, 3, 3, 1}, 309), rnd({2}, 313)};
  want = halo_or_a2a("conv", e, 2, 2, r, 2 * 3 * 2 * 8);
  want.push_back({"conv.backward", "all_reduce", "domain", 1, all_reduce_bytes(2 * 2 * 9 + 2, 8, p)});
  check_patch(line, conv_fn({2, 1, 0}, {2, 1, 1}), c3, want);
  // Halo pooling shares the plan: max pool (edges -inf) and avg pool on the same thin shards.
  ShardedCase mp = sharded_case("thin max_pool k5 p2", {rnd({1, 2, 11}, 306)}, {on_line(Placement::Shard(2))},
                                {{e}});
  check_patch(line,
              [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
                return std::vector<ShardTensor>{max_pool(in[0], {5}, {1}, {2})};
              },
              mp, halo_or_a2a("max_pool", e, 2, 2, r, 2 * 8));
  ShardedCase ap = sharded_case("thin avg_pool k3 p1", {rnd({1, 2, 11}, 307)}, {on_line(Placement::Shard(2))},
                                {{e}});
  check_patch(line,
              [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
                return std::vector<ShardTensor>{avg_pool(in[0], {3}, {1}, {1})};
              },
              ap, halo_or_a2a("avg_pool", e, 1, 1, r, 2 * 8));
}

TEST_CASE("patch conv thin: linear upsampling with a zero-size shard (all_to_all_v)", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  if (p < 3) return;  // a zero-size shard on 2 ranks leaves the other rank everything
  // Coordinate j reads [o_j - 1, o_j + e_j + 1) clipped to [0, L): the windows of a halo 1, padding 1 window op.
  const std::vector<int64_t> e = thin_extents(11, p);
  ShardedCase c = sharded_case("thin upsample_linear x3", {rnd({2, 2, 11}, 320)}, {on_line(Placement::Shard(2))},
                               {{e}});
  check_patch(line,
              [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
                return std::vector<ShardTensor>{upsample_linear(in[0], {33})};
              },
              c, a2a_comms("upsample_linear", "domain", a2a_bytes(e, 1, 1, r, 2 * 2 * 8)));
}

TEST_CASE("patch conv thin: conv2d over the 2x2 mesh with a zero-size shard on dx", "[patch][conv]") {
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  // H over dx: extents 0, 9 (the general halo); W over dy: 4, 3 (the neighbour exchange, on the H-window).
  const std::vector<int64_t> eh = {0, 9}, ew = {4, 3};
  const int cx = grid.coord("dx"), cy = grid.coord("dy");
  const int64_t wb = all_reduce_bytes(3 * 2 * 9 + 3, 8, 2);
  // Padding 2 > halo 1: dx coordinate 0 computes one output, from slice 0 of coordinate 1 (padding 1: none).
  for (int64_t pad : {1, 2}) {
    ShardedCase c = sharded_case("thin conv2d 2x2 pad " + std::to_string(pad), {rnd({1, 2, 9, 7}, 310)},
                                 {{Placement::Shard(2), Placement::Shard(3)}}, {{eh, ew}});
    c.params = {rnd({3, 2, 3, 3}, 311), rnd({3}, 312)};
    // dx first, on the local (eh, ew) block: one slice = 2*ew f64. Then dy on the H-window: dx coordinate 0
    // holds 3 rows (its window, or an edge-filled one when it computes nothing), coordinate 1 its 9 rows plus
    // the window's edges (1 + pad).
    std::vector<ExpectedComm> want = a2a_comms("conv", "dx", a2a_bytes(eh, 1, pad, cx, 2 * ew[cy] * 8));
    want.push_back({"conv.backward", "all_reduce", "dx", 1, wb});
    const int64_t rows = cx == 0 ? 3 : 10 + pad;
    want.push_back({"conv.forward", "halo_exchange", "dy", 1, 2 * rows * 8});
    want.push_back({"conv.backward", "halo_exchange", "dy", 1, 2 * rows * 8});
    want.push_back({"conv.backward", "all_reduce", "dy", 1, wb});
    check_patch(grid, conv_fn({pad}, {1}), c, want);
  }
}
