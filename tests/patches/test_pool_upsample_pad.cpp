// Sharded pooling, upsampling and padding against the serial fp64 oracle on 1-D meshes and the 2x2 mesh: local
// kernel == stride pooling, halo pooling (avg counts the zero padding, max pads with -inf), nearest upsampling
// (local) and linear upsampling (halo of one slice), constant/reflect/replicate padding at the global edges only;
// the exact halo exchanges in the ledger, and the MissingShardPatch cases.
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

std::vector<ExpectedComm> halo_lines(const std::string& op, const std::string& axis, int64_t bytes) {
  if (world_size() == 1 && op != "upsample_linear") return {};  // pooling on one rank: the local op, no halo
  return {{op + ".forward", "halo_exchange", axis, 1, bytes}, {op + ".backward", "halo_exchange", axis, 1, bytes}};
}

ShardedFn one(std::function<ShardTensor(const ShardTensor&)> f) {
  return [f](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) { return std::vector<ShardTensor>{f(in[0])}; };
}

}  // namespace

TEST_CASE("patch pool: kernel == stride is local, stride 1 odd kernels use a halo", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  std::vector<int64_t> ext = split_extents(7, p);
  for (int64_t& e : ext) e *= 2;
  for (bool is_max : {false, true}) {
    const std::string op = is_max ? "max_pool" : "avg_pool";
    auto pool = [is_max](const ShardTensor& x, std::vector<int64_t> k, std::vector<int64_t> s,
                         std::vector<int64_t> pad) { return is_max ? max_pool(x, k, s, pad) : avg_pool(x, k, s, pad); };
    ShardedCase local = sharded_case(op + " k2 s2", {rnd({1, 2, 14, 3}, 200)}, {on_line(Placement::Shard(2))},
                                     {{ext}});
    check_patch(line, one([&](const ShardTensor& x) { return pool(x, {2, 1}, {}, {0}); }), local, {});
    ShardedCase halo = sharded_case(op + " k3 s1 p1", {rnd({2, 2, 13}, 201)}, {on_line(Placement::Shard(2))});
    check_patch(line, one([&](const ShardTensor& x) { return pool(x, {3}, {1}, {1}); }), halo,
                halo_lines(op, "domain", halo_bytes(r, p, 1, 2 * 2 * 8)));
    ShardedCase nopad = sharded_case(op + " k5 s1 p0", {rnd({1, 2, 13}, 202)}, {on_line(Placement::Shard(2))});
    check_patch(line, one([&](const ShardTensor& x) { return pool(x, {5}, {1}, {0}); }), nopad,
                halo_lines(op, "domain", halo_bytes(r, p, 2, 1 * 2 * 8)));
    if (has_grid()) {
      ShardedCase g = sharded_case(op + " 2x2 k3 s1 p1", {rnd({1, 2, 9, 7}, 203)},
                                   {{Placement::Shard(2), Placement::Shard(3)}});
      const int64_t eh = split_extents(9, 2)[grid_mesh().coord("dx")], ew = split_extents(7, 2)[grid_mesh().coord("dy")];
      std::vector<ExpectedComm> want = halo_lines(op, "dx", 2 * ew * 8);
      for (const ExpectedComm& e : halo_lines(op, "dy", 2 * (eh + 2) * 8)) want.push_back(e);
      check_patch(grid_mesh(), one([&](const ShardTensor& x) { return pool(x, {3}, {1}, {1}); }), g, want);
    }
  }
}

TEST_CASE("patch upsample: nearest is local, linear takes a halo of one slice", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  for (const ExtentsCase& e : extents_cases(11, p)) {
    if (e.name == "zero-size shard") continue;  // covered by the MissingShardPatch case
    ShardedCase n = sharded_case("nearest x2 " + e.name, {rnd({1, 2, 11, 3}, 210)}, {on_line(Placement::Shard(2))},
                                 {{e.extents}});
    check_patch(line, one([](const ShardTensor& x) { return upsample_nearest(x, {22, 6}); }), n, {});
    ShardedCase l = sharded_case("linear x3 " + e.name, {rnd({2, 2, 11}, 211)}, {on_line(Placement::Shard(2))},
                                 {{e.extents}});
    check_patch(line, one([](const ShardTensor& x) { return upsample_linear(x, {33}); }), l,
                halo_lines("upsample_linear", "domain", halo_bytes(r, p, 1, 2 * 2 * 8)));
  }
  if (has_grid()) {
    ShardedCase ng = sharded_case("nearest x2 2x2", {rnd({1, 2, 5, 7}, 213)},
                                  {{Placement::Shard(2), Placement::Shard(3)}});
    check_patch(grid_mesh(), one([](const ShardTensor& x) { return upsample_nearest(x, {10, 21}); }), ng, {});
    ShardedCase g = sharded_case("bilinear x2 2x2", {rnd({1, 2, 5, 7}, 212)},
                                 {{Placement::Shard(2), Placement::Shard(3)}});
    // H first on the local block (one slice = 2*ew), then W on the H-padded block (2*(eh + 2): halo + replicate).
    const int64_t eh = split_extents(5, 2)[grid_mesh().coord("dx")], ew = split_extents(7, 2)[grid_mesh().coord("dy")];
    std::vector<ExpectedComm> want = halo_lines("upsample_linear", "dx", 2 * ew * 8);
    for (const ExpectedComm& e : halo_lines("upsample_linear", "dy", 2 * (eh + 2) * 8)) want.push_back(e);
    check_patch(grid_mesh(), one([](const ShardTensor& x) { return upsample_linear(x, {10, 14}); }), g, want);
  }
}

TEST_CASE("patch pad: constant/reflect/replicate at the global edges only; circular wraps the ring", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c = sharded_case("pad constant " + e.name, {rnd({1, 2, 11, 4}, 220)}, {on_line(Placement::Shard(2))},
                                 {{e.extents}});
    check_patch(line, one([](const ShardTensor& x) { return pad(x, {1, 2, 2, 1}, PadMode::constant, 0.5); }), c, {});
  }
  // Reflect/replicate need edge shards longer than the pad: 13 over <= 4 ranks gives >= 3.
  for (PadMode mode : {PadMode::reflect, PadMode::replicate}) {
    ShardedCase c = sharded_case(mode == PadMode::reflect ? "pad reflect" : "pad replicate", {rnd({2, 2, 13}, 221)},
                                 {on_line(Placement::Shard(2))});
    check_patch(line, one([mode](const ShardTensor& x) { return pad(x, {2, 1}, mode); }), c, {});
  }
  // Circular: the first and last rank are ring neighbours; pads (lo, hi) = (2, 1) on the sharded dim, (1, 1) on W.
  const int r = line.rank();
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c = sharded_case("pad circular " + e.name, {rnd({1, 2, 11, 3}, 223)}, {on_line(Placement::Shard(2))},
                                 {{e.extents}});
    // One slice of the W-padded block along H: 2 * (3 + 2) f64.
    const int64_t slice = 2 * 5 * 8;
    const int64_t fwd = ((r == p - 1 ? 2 : 0) + (r == 0 ? 1 : 0)) * slice;
    const int64_t bwd = ((r == 0 ? 2 : 0) + (r == p - 1 ? 1 : 0)) * slice;
    std::vector<ExpectedComm> want;
    if (p > 1)
      want = {{"pad.forward", "ring_shift", "domain", 2, fwd}, {"pad.backward", "ring_shift", "domain", 2, bwd}};
    check_patch(line, one([](const ShardTensor& x) { return pad(x, {1, 1, 2, 1}, PadMode::circular); }), c, want);
  }
  if (has_grid()) {
    ShardedCase g = sharded_case("pad circular 2x2", {rnd({1, 2, 7, 6}, 224)},
                                 {{Placement::Shard(2), Placement::Shard(3)}});
    // W (pads (1, 2)) wraps first, on the local block (slice 2 * eh), then H (pads (2, 1)) on the W-wrapped block
    // (slice 2 * (ew + its wrapped columns)). Forward: the last rank sends lo, the first hi; backward reversed.
    const int cx = grid_mesh().coord("dx"), cy = grid_mesh().coord("dy");
    const int64_t eh = split_extents(7, 2)[cx], ew = split_extents(6, 2)[cy];
    const int64_t cols = ew + (cy == 0 ? 1 : 2);
    const int64_t wy = (cy == 1 ? 1 : 2) * 2 * eh * 8, wy_b = (cy == 0 ? 1 : 2) * 2 * eh * 8;
    const int64_t hx = (cx == 1 ? 2 : 1) * 2 * cols * 8, hx_b = (cx == 0 ? 2 : 1) * 2 * cols * 8;
    check_patch(grid_mesh(), one([](const ShardTensor& x) { return pad(x, {1, 2, 2, 1}, PadMode::circular); }), g,
                {{"pad.forward", "ring_shift", "dx", 2, hx},
                 {"pad.backward", "ring_shift", "dx", 2, hx_b},
                 {"pad.forward", "ring_shift", "dy", 2, wy},
                 {"pad.backward", "ring_shift", "dy", 2, wy_b}});
  }
  if (has_grid()) {
    ShardedCase g = sharded_case("pad reflect 2x2", {rnd({1, 2, 7, 6}, 222)},
                                 {{Placement::Shard(2), Placement::Shard(3)}});
    check_patch(grid_mesh(), one([](const ShardTensor& x) { return pad(x, {1, 2, 2, 1}, PadMode::reflect); }), g, {});
  }
}

TEST_CASE("patch pool/upsample/pad: MissingShardPatch for what cannot be split exactly", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const ShardTensor x = distribute(rnd({1, 2, 13}, 230), line, on_line(Placement::Shard(2)));
  if (p > 1) {
    CHECK_THROWS_AS(avg_pool(x, {2}), MissingShardPatch);            // 13 is not a multiple of the stride
    CHECK_THROWS_AS(max_pool(x, {3}, {2}, {1}), MissingShardPatch);  // stride 2 with kernel 3
  } else {
    CHECK(avg_pool(x, {2}).global_shape() == Shape{1, 2, 6});  // one rank: the local op
  }
  CHECK_THROWS_AS(upsample_nearest(x, {20}), MissingShardPatch);   // not an integer factor
  CHECK_THROWS_AS(upsample_linear(x, {26}, true), MissingShardPatch);
  if (p >= 2) {
    const ShardTensor thin = distribute(rnd({1, 2, p}, 231), line, on_line(Placement::Shard(2)));
    // Halo 2 on shards of 1: the general halo (all_to_all_v; bytes checked in test_halo.cpp).
    const ShardedCheckResult tr = check_sharded(
        line, one([](const ShardTensor& t) { return max_pool(t, {5}, {1}, {2}); }),
        sharded_case("max_pool k5 on shards of 1", {rnd({1, 2, p}, 231)}, {on_line(Placement::Shard(2))}));
    INFO(tr.report);
    CHECK(tr.ok);
    CHECK_THROWS_AS(pad(thin, {1, 1}, PadMode::reflect), MissingShardPatch);
    CHECK_THROWS_AS(pad(thin, {2, 0}, PadMode::circular), MissingShardPatch);  // 2 slices from a shard of 1
  }
  for (const ExtentsCase& e : extents_cases(13, p)) {
    if (e.name != "zero-size shard") continue;
    const ShardedCheckResult zr =
        check_sharded(line, one([](const ShardTensor& t) { return avg_pool(t, {3}, {1}, {1}); }),
                      sharded_case("avg_pool zero-size shard", {rnd({1, 2, 13}, 232)}, {on_line(Placement::Shard(2))},
                                   {{e.extents}}));
    INFO(zr.report);
    CHECK(zr.ok);
    // Nearest upsampling is local: the zero-size shard upsamples to an empty one.
    const ShardedCheckResult nr =
        check_sharded(line, one([](const ShardTensor& t) { return upsample_nearest(t, {26}); }),
                      sharded_case("nearest x2 zero-size shard", {rnd({1, 2, 13}, 234)}, {on_line(Placement::Shard(2))},
                                   {{e.extents}}));
    INFO(nr.report);
    CHECK(nr.ok);
    // Linear upsampling takes the general halo (all_to_all_v; bytes checked in test_halo.cpp).
    const ShardedCheckResult lr =
        check_sharded(line, one([](const ShardTensor& t) { return upsample_linear(t, {26}); }),
                      sharded_case("linear x2 zero-size shard", {rnd({1, 2, 13}, 233)}, {on_line(Placement::Shard(2))},
                                   {{e.extents}}));
    INFO(lr.report);
    CHECK(lr.ok);
  }
}
