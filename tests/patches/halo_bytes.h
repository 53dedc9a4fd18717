// Expected halo collectives of the stride-1 window ops (conv, pooling, linear upsampling) along one sharded dim,
// computed from every rank's extents as the contracts of patches/conv.cpp and patches/pool_upsample_pad.cpp state
// them: the neighbour halo_exchange (h slices to each existing neighbour) when every shard can serve its halo,
// else the general halo's all_to_all_v (patch::halo_window), whose bytes depend on every coordinate's window.
#pragma once
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tests/patches/patch_testing.h"

namespace shardrt::test {

// The input window [lo, hi) of coordinate j for halo h and padding p over extents e: output i is centred on input
// slice i + h - p; j computes the centres it owns (the first also those before 0, the last those from L on) and
// reads [first - h, last + h] clipped to [0, L); nothing when it computes nothing.
inline std::pair<int64_t, int64_t> general_window(const Extents& e, int64_t h, int64_t p, int j) {
  const int n = static_cast<int>(e.size());
  int64_t off = 0, len = 0;
  for (int i = 0; i < n; ++i) {
    if (i < j) off += e[i];
    len += e[i];
  }
  const int64_t a = j == 0 ? h - p : std::max(off, h - p);
  const int64_t b = j == n - 1 ? len + p - h : std::min(off + e[j], len + p - h);
  if (b <= a) return {0, 0};
  return {std::max<int64_t>(0, a - h), std::min(len, b + h)};
}

// (forward, backward) bytes coordinate r sends in the general halo: forward its own slices inside the other
// coordinates' windows, backward the grads of the others' slices inside its own window.
inline std::pair<int64_t, int64_t> general_halo_bytes(const Extents& e, int64_t h, int64_t p, int r, int64_t slice) {
  const int n = static_cast<int>(e.size());
  std::vector<int64_t> off(n + 1, 0);
  for (int j = 0; j < n; ++j) off[j + 1] = off[j] + e[j];
  auto inside = [&](int owner, int reader) {
    const auto [lo, hi] = general_window(e, h, p, reader);
    return std::max<int64_t>(0, std::min(off[owner + 1], hi) - std::max(off[owner], lo));
  };
  int64_t fwd = 0, bwd = 0;
  for (int j = 0; j < n; ++j)
    if (j != r) fwd += inside(r, j) * slice, bwd += inside(j, r) * slice;
  return {fwd, bwd};
}

// The halo lines of `op` on `axis` for coordinate r: the general halo when a shard is thinner than the halo (or
// than one slice) or an edge shard gets no output, else the neighbour exchange. On an axis of one rank the
// window ops run locally (no halo line), except linear upsampling, which exchanges an empty halo.
inline std::vector<ExpectedComm> halo_or_general(const std::string& op, const std::string& axis, const Extents& e,
                                                 int64_t h, int64_t p, int r, int64_t slice) {
  const int n = static_cast<int>(e.size());
  if (n == 1 && op != "upsample_linear") return {};
  bool general = false;
  for (int j = 0; j < n; ++j)
    general = general || e[j] < std::max<int64_t>(h, 1) || (j == 0 && e[j] + p - h < 1) ||
              (j == n - 1 && e[j] + p - h < 1);
  if (general) {
    const auto [fwd, bwd] = general_halo_bytes(e, h, p, r, slice);
    return {{op + ".forward", "all_to_all_v", axis, 1, fwd}, {op + ".backward", "all_to_all_v", axis, 1, bwd}};
  }
  const int64_t b = h * slice * ((r > 0 ? 1 : 0) + (r < n - 1 ? 1 : 0));
  return {{op + ".forward", "halo_exchange", axis, 1, b}, {op + ".backward", "halo_exchange", axis, 1, b}};
}

}  // namespace shardrt::test
