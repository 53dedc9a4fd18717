// Sharded pooling, upsampling and padding against the serial fp64 oracle on 1-D meshes and the 2x2 mesh: local
// kernel == stride pooling, stride-1 halo pooling (avg counts the zero padding, max pads with -inf; strided and
// even kernels: test_pool.cpp), nearest upsampling (local) and linear upsampling (halo of one slice),
// constant/reflect/replicate padding at the global edges only; the exact halo exchanges in the ledger, the
// MissingShardPatch cases, and the bad arguments refused with the local op's error on every rank before any
// collective.
#include "tests/patches/bad_input_testing.h"
#include "tests/patches/halo_bytes.h"

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

// A row calling `op` on the sharded x and, where the local op refuses the arguments too, on the global x.
template <typename E>
BadInput op_rejects(std::string name, std::string says, const Tensor& x, const ShardTensor& xs,
                    std::function<void(const Tensor&)> local_op, std::function<void(const ShardTensor&)> sharded_op,
                    bool local_rejects = true) {
  std::function<void()> local;
  if (local_rejects) local = [=] { local_op(x); };
  return rejects<E>(std::move(name), std::move(says), [=] { sharded_op(xs); }, local);
}

// Rows for avg_pool or max_pool with (kernel, stride, padding).
template <typename E>
BadInput pool_rejects(bool is_max, std::string name, std::string says, const Tensor& x, const ShardTensor& xs,
                      std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> pad) {
  const std::string op = is_max ? "max_pool" : "avg_pool";
  return op_rejects<E>(
      op + " " + name, op + ": " + says, x, xs,
      [=](const Tensor& t) { (void)(is_max ? max_pool(t, k, s, pad) : avg_pool(t, k, s, pad)); },
      [=](const ShardTensor& t) { (void)(is_max ? max_pool(t, k, s, pad) : avg_pool(t, k, s, pad)); });
}

template <typename E>
BadInput upsample_rejects(bool linear, std::string name, std::string says, const Tensor& x, const ShardTensor& xs,
                          std::vector<int64_t> out, bool local_rejects = true) {
  const std::string op = linear ? "upsample_linear" : "upsample_nearest";
  return op_rejects<E>(
      op + " " + name, op + ": " + says, x, xs,
      [=](const Tensor& t) { (void)(linear ? upsample_linear(t, out) : upsample_nearest(t, out)); },
      [=](const ShardTensor& t) { (void)(linear ? upsample_linear(t, out) : upsample_nearest(t, out)); },
      local_rejects);
}

template <typename E>
BadInput pad_rejects(std::string name, std::string says, const Tensor& x, const ShardTensor& xs,
                     std::vector<int64_t> pads, PadMode mode, bool local_rejects = true) {
  return op_rejects<E>(
      "pad " + name, "pad: " + says, x, xs, [=](const Tensor& t) { (void)pad(t, pads, mode); },
      [=](const ShardTensor& t) { (void)pad(t, pads, mode); }, local_rejects);
}

// Bad arguments for x (1, 2, 13) sharded along L (xs; xi: the same layout of an i64 x).
std::vector<BadInput> line_bad_inputs(const Tensor& x, const ShardTensor& xs, const Tensor& xi_full,
                                      const ShardTensor& xi) {
  struct PoolRow {
    std::string name, says;
    std::vector<int64_t> kernel, stride, padding;
  };
  const std::vector<PoolRow> pool_value_errors = {
      {"kernel 0", "kernel [0] has an entry below 1", {0}, {}, {0}},
      {"stride 0", "stride [0] has an entry below 1", {3}, {0}, {1}},
      {"stride -1", "stride [-1] has an entry below 1", {3}, {-1}, {1}},
      {"padding -1", "padding [-1] has an entry below 0", {3}, {1}, {-1}},
      {"padding 2 with kernel 3", "padding [2] must be at most half the kernel [3] (input f64[1, 2, 13] cpu)", {3},
       {1}, {2}},
      {"two kernels for one dim", "kernel needs 1 or 1 entries", {3, 3}, {1}, {1}},
      {"no kernel", "kernel needs 1 or 1 entries", {}, {1}, {0}},
  };
  std::vector<BadInput> rows;
  for (bool is_max : {false, true}) {
    for (const PoolRow& r : pool_value_errors)
      rows.push_back(pool_rejects<ValueError>(is_max, r.name, r.says, x, xs, r.kernel, r.stride, r.padding));
    rows.push_back(pool_rejects<ShapeError>(is_max, "kernel wider than the input",
                                            "kernel [15] does not fit input f64[1, 2, 13] cpu", x, xs, {15}, {1}, {0}));
    const std::string op = is_max ? "max_pool" : "avg_pool";
    rows.push_back(rejects<DTypeError>(
        op + " i64 input", op + ": input must be f32 or f64, got i64[1, 2, 13]",
        [=] { (void)(is_max ? max_pool(xi, {3}, {1}, {1}) : avg_pool(xi, {3}, {1}, {1})); },
        [=] { (void)(is_max ? max_pool(xi_full, {3}, {1}, {1}) : avg_pool(xi_full, {3}, {1}, {1})); }));
  }
  for (bool linear : {false, true}) {
    rows.push_back(upsample_rejects<ValueError>(linear, "two sizes for one dim", "output size needs 1 or 1 entries", x,
                                                xs, {26, 26}));
    rows.push_back(upsample_rejects<ValueError>(linear, "no size", "output size needs 1 or 1 entries", x, xs, {}));
    rows.push_back(
        upsample_rejects<ValueError>(linear, "size -1", "output size [-1] has an entry below 0", x, xs, {-1}));
    rows.push_back(upsample_rejects<ValueError>(linear, "size 0",
                                                "output size [0] has a 0 for the non-empty spatial dim", x, xs, {0}));
    // The local op resizes by any factor; the patch splits integer factors only.
    rows.push_back(upsample_rejects<MissingShardPatch>(linear, "factor 20/13", "no patch for placements", x, xs, {20},
                                                       false));
    const std::string op = linear ? "upsample_linear" : "upsample_nearest";
    rows.push_back(rejects<DTypeError>(
        op + " i64 input", op + ": input must be f32 or f64",
        [=] { (void)(linear ? upsample_linear(xi, {26}) : upsample_nearest(xi, {26})); },
        [=] { (void)(linear ? upsample_linear(xi_full, {26}) : upsample_nearest(xi_full, {26})); }));
  }
  rows.push_back(pad_rejects<ValueError>("no pads", "expected 2, 4 or 6 pad values", x, xs, {}, PadMode::constant));
  rows.push_back(pad_rejects<ValueError>("one pad", "expected 2, 4 or 6 pad values", x, xs, {1}, PadMode::constant));
  rows.push_back(pad_rejects<ValueError>("eight pads", "expected 2, 4 or 6 pad values", x, xs, {1, 1, 1, 1, 1, 1, 1, 1},
                                         PadMode::constant));
  rows.push_back(pad_rejects<ShapeError>("cropping more than the dim", "pads (-7, -7) on dim 2 crop more than", x, xs,
                                         {-7, -7}, PadMode::constant));
  rows.push_back(pad_rejects<ShapeError>("reflect as wide as the dim", "reflect pads (13, 0) on dim 2 must be smaller",
                                         x, xs, {13, 0}, PadMode::reflect));
  // Negative widths that the local op crops by: on a sharded dim the patch has none (the contract's table).
  rows.push_back(pad_rejects<MissingShardPatch>("negative widths on the sharded dim", "no patch for placements", x, xs,
                                                {-1, 0}, PadMode::constant, false));
  rows.push_back(rejects<DTypeError>("pad i64 input", "pad: input must be f32 or f64",
                                     [=] { (void)pad(xi, {1, 1}); }, [=] { (void)pad(xi_full, {1, 1}); }));
  return rows;
}

// Bad arguments for x (1, 2, 9, 7) sharded along H and W over the 2x2 mesh.
std::vector<BadInput> grid_bad_inputs(const Tensor& x, const ShardTensor& xs) {
  std::vector<BadInput> rows;
  for (bool is_max : {false, true}) {
    rows.push_back(pool_rejects<ValueError>(is_max, "kernel (3, 0)", "kernel [3, 0] has an entry below 1", x, xs,
                                            {3, 0}, {1}, {0}));
    rows.push_back(pool_rejects<ValueError>(is_max, "stride (1, 0)", "stride [1, 0] has an entry below 1", x, xs, {3},
                                            {1, 0}, {1}));
    rows.push_back(pool_rejects<ValueError>(is_max, "padding (1, 2) with kernel 3",
                                            "padding [1, 2] must be at most half the kernel [3, 3]", x, xs, {3}, {1},
                                            {1, 2}));
    rows.push_back(
        pool_rejects<ValueError>(is_max, "three kernels", "kernel needs 1 or 2 entries", x, xs, {3, 3, 3}, {1}, {1}));
  }
  for (bool linear : {false, true}) {
    rows.push_back(upsample_rejects<ValueError>(linear, "sizes (18, 0)",
                                                "output size [18, 0] has a 0 for the non-empty spatial dim 1", x, xs,
                                                {18, 0}));
    rows.push_back(upsample_rejects<ValueError>(linear, "three sizes", "output size needs 1 or 2 entries", x, xs,
                                                {18, 14, 2}));
  }
  rows.push_back(pad_rejects<ShapeError>("cropping more than H", "pads (-5, -5) on dim 2 crop more than", x, xs,
                                         {0, 0, -5, -5}, PadMode::constant));
  rows.push_back(pad_rejects<MissingShardPatch>("negative widths on the sharded W", "no patch for placements", x, xs,
                                                {0, -1}, PadMode::constant, false));
  return rows;
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
  // Pooling splits any stride and kernel (13 not a multiple of the stride, stride 2 with kernel 3): see
  // tests/patches/test_pool.cpp for their parity and collectives.
  CHECK(avg_pool(x, {2}).global_shape() == Shape{1, 2, 6});
  CHECK(max_pool(x, {3}, {2}, {1}).global_shape() == Shape{1, 2, 7});
  CHECK_THROWS_AS(upsample_nearest(x, {20}), MissingShardPatch);   // not an integer factor
  CHECK_THROWS_AS(upsample_linear(x, {26}, true), MissingShardPatch);
  if (p >= 2) {
    const ShardTensor thin = distribute(rnd({1, 2, p}, 231), line, on_line(Placement::Shard(2)));
    // Halo 2 on shards of 1: the general halo (all_to_all_v; bytes checked in test_halo.cpp).
    line.flat().ledger().reset();
    const ShardedCheckResult tr = check_sharded(
        line, one([](const ShardTensor& t) { return max_pool(t, {5}, {1}, {2}); }),
        sharded_case("max_pool k5 on shards of 1", {rnd({1, 2, p}, 231)}, {on_line(Placement::Shard(2))}));
    INFO(tr.report);
    CHECK(tr.ok);
    check_ledger(line, halo_or_general("max_pool", "domain", split_extents(p, p), 2, 2, line.rank(), 2 * 8));
    CHECK_THROWS_AS(pad(thin, {1, 1}, PadMode::reflect), MissingShardPatch);
    CHECK_THROWS_AS(pad(thin, {2, 0}, PadMode::circular), MissingShardPatch);  // 2 slices from a shard of 1
  }
  for (const ExtentsCase& e : extents_cases(13, p)) {
    if (e.name != "zero-size shard") continue;
    line.flat().ledger().reset();
    const ShardedCheckResult zr =
        check_sharded(line, one([](const ShardTensor& t) { return avg_pool(t, {3}, {1}, {1}); }),
                      sharded_case("avg_pool zero-size shard", {rnd({1, 2, 13}, 232)}, {on_line(Placement::Shard(2))},
                                   {{e.extents}}));
    INFO(zr.report);
    CHECK(zr.ok);
    check_ledger(line, halo_or_general("avg_pool", "domain", e.extents, 1, 1, line.rank(), 2 * 8));
    // Nearest upsampling is local: the zero-size shard upsamples to an empty one.
    line.flat().ledger().reset();
    const ShardedCheckResult nr =
        check_sharded(line, one([](const ShardTensor& t) { return upsample_nearest(t, {26}); }),
                      sharded_case("nearest x2 zero-size shard", {rnd({1, 2, 13}, 234)}, {on_line(Placement::Shard(2))},
                                   {{e.extents}}));
    INFO(nr.report);
    CHECK(nr.ok);
    check_ledger(line, {});
    // Linear upsampling takes the general halo (all_to_all_v; bytes checked in test_halo.cpp).
    line.flat().ledger().reset();
    const ShardedCheckResult lr =
        check_sharded(line, one([](const ShardTensor& t) { return upsample_linear(t, {26}); }),
                      sharded_case("linear x2 zero-size shard", {rnd({1, 2, 13}, 233)}, {on_line(Placement::Shard(2))},
                                   {{e.extents}}));
    INFO(lr.report);
    CHECK(lr.ok);
    check_ledger(line, halo_or_general("upsample_linear", "domain", e.extents, 1, 1, line.rank(), 2 * 8));
  }
}

TEST_CASE("patch pool/upsample/pad: bad arguments are the local op's error on every rank, before any collective",
          "[patch][conv]") {
  const Mesh& line = line_mesh();
  const Tensor x = rnd({1, 2, 13}, 240), xi = iota({1, 2, 13}, DType::i64);
  for (const ExtentsCase& e : extents_cases(13, line.size())) {
    INFO("1-D mesh, " << e.name << " extents");
    const ShardTensor xs = distribute(x, line, on_line(S(2)), AxisExtents{e.extents});
    check_rejected(line_bad_inputs(x, xs, xi, distribute(xi, line, on_line(S(2)), AxisExtents{e.extents})));
    // The job goes on: a halo pool and a linear upsample on the same layout (their collectives pair up).
    line.flat().ledger().reset();
    const ShardedCheckResult r = check_sharded(
        line, one([](const ShardTensor& t) { return upsample_linear(max_pool(t, {3}, {1}, {1}), {26}); }),
        sharded_case("max_pool, upsample_linear after the bad inputs", {x}, {on_line(S(2))}, {{e.extents}}));
    INFO(r.report);
    CHECK(r.ok);
    // max_pool k3 p1 keeps the extents, so both halos follow the same rule over the same extents.
    std::vector<ExpectedComm> want = halo_or_general("max_pool", "domain", e.extents, 1, 1, line.rank(), 2 * 8);
    for (const ExpectedComm& l : halo_or_general("upsample_linear", "domain", e.extents, 1, 1, line.rank(), 2 * 8))
      want.push_back(l);
    check_ledger(line, want);
  }
  if (!has_grid()) return;
  const Tensor x2 = rnd({1, 2, 9, 7}, 241);
  for (const AxisExtents& ext : grid_extents(9, 7)) {
    const ShardTensor xs = distribute(x2, grid_mesh(), {S(2), S(3)}, ext);
    check_rejected(grid_bad_inputs(x2, xs));
    // k3 s1 p1 takes conv's halo plan: H over dx first, on the local block (one slice: 2 * ew f64), by the
    // neighbour exchange or (the zero-size shard) the general halo; then W over dy on the H-padded block: eh + 2
    // rows (halo or zero padding on each side), or the 3 edge-filled rows of a coordinate without output.
    const int cx = grid_mesh().coord("dx"), cy = grid_mesh().coord("dy");
    const int64_t eh = ext[0][cx], ew = ext[1][cy];
    const int64_t rows = eh == 0 ? 3 : eh + 2;
    std::vector<ExpectedComm> want = halo_or_general("avg_pool", "dx", ext[0], 1, 1, cx, 2 * ew * 8);
    for (const ExpectedComm& l : halo_or_general("avg_pool", "dy", ext[1], 1, 1, cy, 2 * rows * 8))
      want.push_back(l);
    check_patch(grid_mesh(), one([](const ShardTensor& t) { return avg_pool(t, {3}, {1}, {1}); }),
                sharded_case("avg_pool 2x2 after the bad inputs", {x2}, {{S(2), S(3)}}, {ext}), want);
  }
}

TEST_CASE("patch upsample: one output size for every spatial dim, as the local op takes it", "[patch][conv]") {
  const Mesh& line = line_mesh();
  // (1, 2, 6, 6) sharded along H, resized to (12, 12) from the one entry {12}.
  line.flat().ledger().reset();
  const ShardedCheckResult r =
      check_sharded(line, one([](const ShardTensor& t) { return upsample_nearest(t, {12}); }),
                    sharded_case("nearest {12} on 6x6", {rnd({1, 2, 6, 6}, 242)}, {on_line(S(2))}));
  INFO(r.report);
  CHECK(r.ok);
  check_ledger(line, {});  // nearest is local
  const ShardTensor y = upsample_linear(distribute(rnd({1, 2, 6, 6}, 243), line, on_line(S(2))), {12});
  CHECK(y.global_shape() == Shape{1, 2, 12, 12});
}

// ---- configurations the contract accepts, each with its exact collectives (issue 9) ----------------------------

TEST_CASE("patch upsample: trilinear and 3-D nearest, 1-D mesh and 2x2", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  // D sharded: trilinear takes one slice (2 * H * W values) from each neighbour; nearest is local.
  ShardedCase tl = sharded_case("trilinear D sharded", {rnd({1, 2, 7, 3, 2}, 250)}, {on_line(S(2))});
  check_patch(line, one([](const ShardTensor& x) { return upsample_linear(x, {14, 6, 4}); }), tl,
              halo_lines("upsample_linear", "domain", halo_bytes(r, p, 1, 2 * 3 * 2 * 8)));
  for (const ExtentsCase& e : extents_cases(7, p)) {
    ShardedCase n = sharded_case("nearest 3-D D sharded " + e.name, {rnd({1, 2, 7, 3, 2}, 251)}, {on_line(S(2))},
                                 {{e.extents}});
    check_patch(line, one([](const ShardTensor& x) { return upsample_nearest(x, {14, 9, 4}); }), n, {});
  }
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  // D over dx, H over dy: D first on the local block (slice 2 * eh * W), then H on the D-padded block (ed + 2:
  // the halo and the replicated global edge).
  const int64_t ed = split_extents(5, 2)[grid.coord("dx")], eh = split_extents(6, 2)[grid.coord("dy")];
  ShardedCase g = sharded_case("trilinear 2x2", {rnd({1, 2, 5, 6, 3}, 252)}, {{S(2), S(3)}});
  std::vector<ExpectedComm> want = halo_lines("upsample_linear", "dx", 2 * eh * 3 * 8);
  for (const ExpectedComm& e : halo_lines("upsample_linear", "dy", 2 * (ed + 2) * 3 * 8)) want.push_back(e);
  check_patch(grid, one([](const ShardTensor& x) { return upsample_linear(x, {10, 12, 6}); }), g, want);
  for (const AxisExtents& ext : grid_extents(5, 6)) {
    ShardedCase n = sharded_case("nearest 3-D 2x2", {rnd({1, 2, 5, 6, 3}, 253)}, {{S(2), S(3)}}, {ext});
    check_patch(grid, one([](const ShardTensor& x) { return upsample_nearest(x, {10, 12, 9}); }), n, {});
  }
}

TEST_CASE("patch pad: constant and replicate on the 2x2 mesh, no collective", "[patch][conv]") {
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  const auto ext = grid_extents(7, 6);  // uneven; and H's first coordinate empty
  for (const AxisExtents& e : ext) {
    ShardedCase c = sharded_case("pad constant 2x2", {rnd({1, 2, 7, 6}, 254)}, {{S(2), S(3)}}, {e});
    check_patch(grid, one([](const ShardTensor& x) { return pad(x, {1, 2, 2, 1}, PadMode::constant, 0.5); }), c, {});
  }
  ShardedCase c = sharded_case("pad replicate 2x2", {rnd({1, 2, 7, 6}, 255)}, {{S(2), S(3)}}, {ext[0]});
  check_patch(grid, one([](const ShardTensor& x) { return pad(x, {1, 2, 2, 1}, PadMode::replicate); }), c, {});
  // Replicating the low H edge from an empty first shard: refused on every rank, no collective.
  grid.flat().ledger().reset();
  const ShardTensor xs = distribute(rnd({1, 2, 7, 6}, 255), grid, {S(2), S(3)}, ext[1]);
  CHECK_THROWS_AS(pad(xs, {1, 2, 2, 1}, PadMode::replicate), MissingShardPatch);
  CHECK(grid.flat().ledger().total_calls() == 0);
}

TEST_CASE("patch pool/pad: zero-size shards the local op would refuse on that rank alone", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  if (p < 3) return;  // the cases need an empty shard between two non-empty ones
  // Reflect padding with an empty interior shard: its local pads are (0, 0), which the local op refuses for an
  // empty dim; the patch pads nothing there (it was a ShapeError on the empty rank, the others hung).
  const Extents e = split_around_zero(11, p);
  ShardedCase c = sharded_case("pad reflect, zero-size interior shard", {rnd({1, 2, 11, 3}, 256)}, {on_line(S(2))},
                               {{e}});
  check_patch(line, one([](const ShardTensor& x) { return pad(x, {1, 1, 2, 1}, PadMode::reflect); }), c, {});
  // kernel == stride pooling with a zero-size shard: the local op refuses an empty window, so the patch takes the
  // general path there (it was a ShapeError on the empty rank, the others hung).
  Extents twice = e;
  for (int64_t& v : twice) v *= 2;
  for (bool is_max : {false, true}) {
    ShardedCase pc = sharded_case(std::string(is_max ? "max" : "avg") + "_pool k=s=2, zero-size shard",
                                  {rnd({1, 2, 22}, 257)}, {on_line(S(2))}, {{twice}});
    // Start ownership: every extent is even, so coordinate j's windows [2i, 2i + 2) lie inside its own slices
    // [o_j, o_j + e_j); the empty coordinate owns no output (edge-filled window, nothing received). The general
    // halo still runs (one all_to_all_v each way, the empty rank's graph matching the others) and moves the
    // slices of r inside the other coordinates' windows: none, both ways.
    const std::string op = is_max ? "max_pool" : "avg_pool";
    check_patch(line, one([is_max](const ShardTensor& x) { return is_max ? max_pool(x, {2}) : avg_pool(x, {2}); }),
                pc,
                {{op + ".forward", "all_to_all_v", "domain", 1, 0},
                 {op + ".backward", "all_to_all_v", "domain", 1, 0}});
  }
}
