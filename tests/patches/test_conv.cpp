// Sharded convolution against the serial fp64 oracle: halo convs (1d/2d/3d, padding 0/1/2, dilation, kernel 5) on
// 1-D meshes and the 2x2 mesh (H over "dx", W over "dy"), patchify (kernel == stride) and conv_transpose with no
// collective but the weight-grad all-reduce, every parameter grad compared, the exact halo exchanges in the
// ledger, the MissingShardPatch cases (decided identically on every rank), and the bad arguments refused with the
// local op's error on every rank before any collective.
#include "tests/patches/bad_input_testing.h"
#include "tests/patches/halo_bytes.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

ShardedFn conv_fn(std::vector<int64_t> stride, std::vector<int64_t> padding, std::vector<int64_t> dilation) {
  return [=](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    return std::vector<ShardTensor>{conv(in[0], p[0], p.size() > 1 ? p[1] : Tensor(), stride, padding, dilation)};
  };
}

std::vector<ShardTensor> conv_transpose_fn(const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
  return {conv_transpose(in[0], p[0], p[1])};
}

// The halo lines of one exchange per direction (forward and backward move the same bytes) plus the packed
// weight+bias all-reduce.
// On one rank nothing is split: no halo, only the (0-byte) all-reduce.
std::vector<ExpectedComm> halo_comms(const std::string& axis, int64_t fwd_bytes, int64_t wb_bytes) {
  if (world_size() == 1) return {{"conv.backward", "all_reduce", axis, 1, wb_bytes}};
  return {{"conv.forward", "halo_exchange", axis, 1, fwd_bytes},
          {"conv.backward", "halo_exchange", axis, 1, fwd_bytes},
          {"conv.backward", "all_reduce", axis, 1, wb_bytes}};
}

// The arguments of one conv call, and the rows that call conv with them on the sharded x and (where the local op
// refuses them too) on the global x.
struct ConvArgs {
  Tensor w, bias;
  std::vector<int64_t> stride{1}, padding{0}, dilation{1};
};

template <typename E>
BadInput conv_rejects(std::string name, std::string says, const Tensor& x, const ShardTensor& xs, ConvArgs a,
                      bool local_rejects = true) {
  std::function<void()> local;
  if (local_rejects) local = [=] { (void)conv(x, a.w, a.bias, a.stride, a.padding, a.dilation); };
  return rejects<E>(std::move(name), std::move(says),
                    [=] { (void)conv(xs, a.w, a.bias, a.stride, a.padding, a.dilation); }, local);
}

template <typename E>
BadInput conv_transpose_rejects(std::string name, std::string says, const Tensor& x, const ShardTensor& xs,
                                const Tensor& w, const Tensor& bias) {
  return rejects<E>(std::move(name), std::move(says), [=] { (void)conv_transpose(xs, w, bias); },
                    [=] { (void)conv_transpose(x, w, bias); });
}

// Bad arguments for x (1, 2, 13) sharded along L (xs; xi: the same layout of an i64 x).
std::vector<BadInput> conv1d_bad_inputs(const Tensor& x, const ShardTensor& xs, const Tensor& xi_full,
                                        const ShardTensor& xi) {
  const Tensor w = rnd({2, 2, 3}, 161), b = rnd({2}, 162), w0 = zeros({2, 2, 0}, {DType::f64});
  std::vector<BadInput> rows = {
      conv_rejects<ShapeError>("kernel 0", "conv: weight f64[2, 2, 0] cpu has an empty kernel", x, xs, {w0, b}),
      conv_rejects<ValueError>("stride 0", "conv: stride [0] has an entry below 1", x, xs, {w, b, {0}}),
      conv_rejects<ValueError>("stride -1", "conv: stride [-1] has an entry below 1", x, xs, {w, b, {-1}}),
      conv_rejects<ValueError>("padding -1", "conv: padding [-1] has an entry below 0", x, xs, {w, b, {1}, {-1}}),
      conv_rejects<ValueError>("dilation 0", "conv: dilation [0] has an entry below 1", x, xs,
                               {w, b, {1}, {1}, {0}}),
      conv_rejects<ValueError>("two strides for one dim", "conv: stride needs 1 or 1 entries", x, xs,
                               {w, b, {1, 1}}),
      conv_rejects<ValueError>("no stride", "conv: stride needs 1 or 1 entries", x, xs, {w, b, {}}),
      conv_rejects<ShapeError>("weight channels", "conv: input f64[1, 2, 13] cpu has 2 channels but weight", x, xs,
                               {rnd({2, 3, 3}, 163), b}),
      conv_rejects<ShapeError>("weight rank", "conv: weight f64[2, 2, 3, 3] cpu must be (Cout, Cin, *kernel)", x, xs,
                               {rnd({2, 2, 3, 3}, 164), b}),
      conv_rejects<ShapeError>("bias size", "conv: bias f64[3] cpu must be (Cout)", x, xs, {w, rnd({3}, 165)}),
      conv_rejects<ShapeError>("kernel wider than the padded input", "does not fit input f64[1, 2, 13]", x, xs,
                               {rnd({2, 2, 17}, 166), b, {1}, {1}}),
      conv_rejects<DTypeError>("weight dtype", "conv: dtypes differ", x, xs, {to_dtype(w, DType::f32), b}),
      rejects<DTypeError>("i64 input", "conv: input must be f32 or f64, got i64[1, 2, 13]",
                          [=] { (void)conv(xi, w, b); }, [=] { (void)conv(xi_full, w, b); }),
      conv_transpose_rejects<ShapeError>("conv_transpose weight channels",
                                         "conv_transpose: input f64[1, 2, 13] cpu has 2", x, xs, rnd({3, 2, 2}, 167),
                                         Tensor()),
      conv_transpose_rejects<ShapeError>("conv_transpose weight rank", "conv_transpose: weight f64[2, 2] cpu must be",
                                         x, xs, rnd({2, 2}, 168), Tensor()),
      conv_transpose_rejects<ShapeError>("conv_transpose kernel 0", "conv_transpose: weight f64[2, 2, 0] cpu has an "
                                         "empty kernel", x, xs, w0, Tensor()),
      conv_transpose_rejects<ShapeError>("conv_transpose bias size", "conv_transpose: bias f64[3] cpu must be (Cout)",
                                         x, xs, rnd({2, 2, 2}, 169), rnd({3}, 170)),
      rejects<DTypeError>("conv_transpose i64 input", "conv_transpose: input must be f32 or f64",
                          [=] { (void)conv_transpose(xi, rnd({2, 2, 2}, 169)); },
                          [=] { (void)conv_transpose(xi_full, rnd({2, 2, 2}, 169)); }),
  };
  // What the local op accepts but no patch splits (an axis of one rank splits nothing: accepted there).
  if (xs.mesh().size() > 1)
    rows.push_back(conv_rejects<MissingShardPatch>("stride 2 with kernel 3", "conv: no patch for placements", x, xs,
                                                   {w, b, {2}, {1}}, false));
  return rows;
}

// Bad arguments for x (1, 2, 9, 7) sharded along H and W over the 2x2 mesh.
std::vector<BadInput> conv2d_bad_inputs(const Tensor& x, const ShardTensor& xs) {
  const Tensor w = rnd({3, 2, 3, 3}, 171), b = rnd({3}, 172);
  return {
      conv_rejects<ValueError>("stride (1, 0)", "conv: stride [1, 0] has an entry below 1", x, xs, {w, b, {1, 0}}),
      conv_rejects<ValueError>("padding (1, -1)", "conv: padding [1, -1] has an entry below 0", x, xs,
                               {w, b, {1}, {1, -1}}),
      conv_rejects<ValueError>("dilation 0", "conv: dilation [0] has an entry below 1", x, xs,
                               {w, b, {1}, {1}, {0}}),
      conv_rejects<ValueError>("three strides for two dims", "conv: stride needs 1 or 2 entries", x, xs,
                               {w, b, {1, 1, 1}}),
      conv_rejects<ShapeError>("kernel (3, 0)", "has an empty kernel", x, xs,
                               {zeros({3, 2, 3, 0}, {DType::f64}), b}),
      conv_rejects<ShapeError>("weight channels", "conv: input f64[1, 2, 9, 7] cpu has 2 channels", x, xs,
                               {rnd({3, 4, 3, 3}, 173), b}),
  };
}

}  // namespace

TEST_CASE("patch conv: halo conv1d over a 1-D mesh, padding, dilation, kernel 5", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  struct Cfg {
    const char* name;
    int64_t k, pad, dil;
  };
  // (B, C) = (2, 3): one slice of the padded input along L is 2*3 f64.
  const int64_t slice = 2 * 3 * 8;
  for (const Cfg& cfg : {Cfg{"k3 p1", 3, 1, 1}, Cfg{"k3 p0", 3, 0, 1}, Cfg{"k3 p2 d2", 3, 2, 2}, Cfg{"k5 p2", 5, 2, 1}}) {
    const int64_t h = cfg.dil * (cfg.k - 1) / 2;
    // 23 over <= 4 ranks: shards of >= 5, so kernel 3 takes the overlapped slab path; kernel 5 (>= 7 needed) the
    // padded one beyond 2 ranks.
    ShardedCase c = sharded_case(std::string("conv1d ") + cfg.name, {rnd({2, 3, 23}, 100)},
                                 {on_line(Placement::Shard(2))}, {{split_extents(23, p)}});
    c.params = {rnd({4, 3, cfg.k}, 101), rnd({4}, 102)};
    check_patch(line, conv_fn({1}, {cfg.pad}, {cfg.dil}), c,
                halo_comms("domain", halo_bytes(r, p, h, slice), all_reduce_bytes(4 * 3 * cfg.k + 4, 8, p)));
  }
  // Without a bias only the weight is reduced.
  ShardedCase nb = sharded_case("conv1d no bias", {rnd({2, 3, 13}, 103)}, {on_line(Placement::Shard(2))});
  nb.params = {rnd({4, 3, 3}, 104)};
  check_patch(line, conv_fn({1}, {1}, {1}), nb,
              halo_comms("domain", halo_bytes(r, p, 1, slice), all_reduce_bytes(4 * 3 * 3, 8, p)));
}

TEST_CASE("patch conv: halo conv2d/conv3d over a 1-D mesh; unsharded dims keep any stride", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  // conv2d, H sharded, W unsharded with stride 2 and padding 1 on both.
  ShardedCase c2 = sharded_case("conv2d H sharded, W stride 2", {rnd({1, 2, 11, 6}, 110)},
                                {on_line(Placement::Shard(2))});
  c2.params = {rnd({3, 2, 3, 3}, 111), rnd({3}, 112)};
  check_patch(line, conv_fn({1, 2}, {1, 1}, {1}), c2,
              halo_comms("domain", halo_bytes(r, p, 1, 1 * 2 * 6 * 8), all_reduce_bytes(3 * 2 * 9 + 3, 8, p)));
  // conv2d, W sharded (the halo is a strided slab).
  ShardedCase cw = sharded_case("conv2d W sharded", {rnd({1, 2, 5, 11}, 113)}, {on_line(Placement::Shard(3))});
  cw.params = {rnd({3, 2, 3, 3}, 114), rnd({3}, 115)};
  check_patch(line, conv_fn({1}, {1}, {1}), cw,
              halo_comms("domain", halo_bytes(r, p, 1, 1 * 2 * 5 * 8), all_reduce_bytes(3 * 2 * 9 + 3, 8, p)));
  // conv3d, D sharded.
  ShardedCase c3 = sharded_case("conv3d D sharded", {rnd({1, 2, 9, 4, 3}, 116)}, {on_line(Placement::Shard(2))});
  c3.params = {rnd({2, 2, 3, 3, 3}, 117), rnd({2}, 118)};
  check_patch(line, conv_fn({1}, {1}, {1}), c3,
              halo_comms("domain", halo_bytes(r, p, 1, 2 * 4 * 3 * 8), all_reduce_bytes(2 * 2 * 27 + 2, 8, p)));
}

TEST_CASE("patch conv: halo conv2d over the 2x2 mesh, H over dx and W over dy (corners)", "[patch][conv]") {
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  const Placements pl = {Placement::Shard(2), Placement::Shard(3)};
  // W = 7 (shards of 4, 3: the padded path) and W = 12 (shards of 6: W's exchange overlaps the interior).
  for (auto [pad, width] : {std::pair<int64_t, int64_t>{1, 7}, {0, 7}, {1, 12}}) {
    ShardedCase c = sharded_case("conv2d 2x2 pad " + std::to_string(pad) + " W " + std::to_string(width),
                                 {rnd({1, 2, 9, width}, 120)}, {pl});
    c.params = {rnd({3, 2, 3, 3}, 121), rnd({3}, 122)};
    // H is exchanged first on the local (eh, ew) block: one slice = 2*ew f64; then W on the H-padded block
    // (eh + 1 + pad rows): one slice = 2*(eh + 1 + pad) f64.
    const int64_t eh = split_extents(9, 2)[grid.coord("dx")], ew = split_extents(width, 2)[grid.coord("dy")];
    const int64_t wb = all_reduce_bytes(3 * 2 * 9 + 3, 8, 2);
    std::vector<ExpectedComm> want = halo_comms("dx", 2 * ew * 8, wb);
    for (const ExpectedComm& e : halo_comms("dy", 2 * (eh + 1 + pad) * 8, wb)) want.push_back(e);
    check_patch(grid, conv_fn({1}, {pad}, {1}), c, want);
  }
}

TEST_CASE("patch conv: patchify (kernel == stride) and conv_transpose: no halo", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  // Extents 2 * (7 split over p): uneven, every one a multiple of the stride.
  std::vector<int64_t> ext = split_extents(7, p);
  for (int64_t& e : ext) e *= 2;
  ShardedCase pf = sharded_case("patchify conv2d k2 s2", {rnd({1, 3, 14, 4}, 130)}, {on_line(Placement::Shard(2))},
                                {{ext}});
  pf.params = {rnd({4, 3, 2, 2}, 131), rnd({4}, 132)};
  check_patch(line, conv_fn({2}, {0}, {1}), pf,
              {{"conv.backward", "all_reduce", "domain", 1, all_reduce_bytes(4 * 3 * 4 + 4, 8, p)}});
  ShardedCase ct = sharded_case("conv_transpose1d k2", {rnd({2, 3, 7}, 133)}, {on_line(Placement::Shard(2))});
  ct.params = {rnd({3, 2, 2}, 134), rnd({2}, 135)};
  check_patch(line, conv_transpose_fn, ct,
              {{"conv_transpose.backward", "all_reduce", "domain", 1, all_reduce_bytes(3 * 2 * 2 + 2, 8, p)}});
  if (has_grid()) {
    // Patchify over both sharded dims: extents 4,4 (H over dx) and 2,2 (W over dy), all multiples of 2.
    ShardedCase pg = sharded_case("patchify conv2d 2x2", {rnd({1, 3, 8, 4}, 139)},
                                  {{Placement::Shard(2), Placement::Shard(3)}});
    pg.params = {rnd({4, 3, 2, 2}, 131), rnd({4}, 132)};
    const int64_t pb = all_reduce_bytes(4 * 3 * 4 + 4, 8, 2);
    check_patch(grid_mesh(), conv_fn({2}, {0}, {1}), pg,
                {{"conv.backward", "all_reduce", "dx", 1, pb}, {"conv.backward", "all_reduce", "dy", 1, pb}});
    ShardedCase g = sharded_case("conv_transpose2d 2x2", {rnd({1, 3, 5, 3}, 136)},
                                 {{Placement::Shard(2), Placement::Shard(3)}});
    g.params = {rnd({3, 2, 2, 2}, 137), rnd({2}, 138)};
    const int64_t b = all_reduce_bytes(3 * 2 * 4 + 2, 8, 2);
    check_patch(grid_mesh(), conv_transpose_fn, g,
                {{"conv_transpose.backward", "all_reduce", "dx", 1, b},
                 {"conv_transpose.backward", "all_reduce", "dy", 1, b}});
  }
}

TEST_CASE("patch conv: MissingShardPatch for what cannot be split exactly", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const Tensor x = rnd({1, 2, 13}, 140);
  const ShardTensor xs = distribute(x, line, on_line(Placement::Shard(2)));
  const Tensor w3 = rnd({2, 2, 3}, 141), w2 = rnd({2, 2, 2}, 142);
  if (p == 1) {
    // An axis of one rank splits nothing: every configuration of the local op is accepted.
    CHECK(conv(xs, w3, Tensor(), {2}, {1}, {1}).global_shape() == Shape{1, 2, 7});
    CHECK(conv(xs, w2, Tensor(), {2}, {0}, {1}).global_shape() == Shape{1, 2, 6});
    return;
  }
  // Stride 2 with kernel 3; even kernel with stride 1; patchify with extents not multiples of the stride (13 is odd).
  CHECK_THROWS_AS(conv(xs, w3, Tensor(), {2}, {1}, {1}), MissingShardPatch);
  CHECK_THROWS_AS(conv(xs, w2, Tensor(), {1}, {0}, {1}), MissingShardPatch);
  CHECK_THROWS_AS(conv(xs, w2, Tensor(), {2}, {0}, {1}), MissingShardPatch);
  // A sharded channel dim.
  const ShardTensor xc = distribute(rnd({1, 4, 5}, 143), line, on_line(Placement::Shard(1)));
  CHECK_THROWS_AS(conv(xc, rnd({2, 4, 3}, 144), Tensor(), {1}, {1}, {1}), MissingShardPatch);
  if (p >= 2) {
    // A shard thinner than the halo: kernel 5 (halo 2) on shards of 1 takes the general halo (all_to_all_v;
    // its bytes are checked in test_halo.cpp).
    ShardedCase thin = sharded_case("conv1d k5 on shards of 1", {rnd({1, 2, p}, 145)}, {on_line(Placement::Shard(2))});
    thin.params = {rnd({2, 2, 5}, 146), rnd({2}, 148)};
    line.flat().ledger().reset();
    const ShardedCheckResult tr = check_sharded(line, conv_fn({1}, {2}, {1}), thin);
    INFO(tr.report);
    CHECK(tr.ok);
    std::vector<ExpectedComm> tw = halo_or_general("conv", "domain", split_extents(p, p), 2, 2, line.rank(), 2 * 8);
    tw.push_back({"conv.backward", "all_reduce", "domain", 1, all_reduce_bytes(2 * 2 * 5 + 2, 8, p)});
    check_ledger(line, tw);
  }
  for (const ExtentsCase& e : extents_cases(13, p)) {
    if (e.name != "zero-size shard") continue;
    // A zero-size shard: the halo conv takes the general halo; conv_transpose and the patchify conv give that
    // rank an empty output shard (and it still joins the weight-grad all_reduce).
    ShardedCase z = sharded_case("conv1d zero-size shard", {x}, {on_line(Placement::Shard(2))}, {{e.extents}});
    z.params = {w3, rnd({2}, 149)};
    line.flat().ledger().reset();
    const ShardedCheckResult zr = check_sharded(line, conv_fn({1}, {1}, {1}), z);
    INFO(zr.report);
    CHECK(zr.ok);
    std::vector<ExpectedComm> zw = halo_or_general("conv", "domain", e.extents, 1, 1, line.rank(), 2 * 8);
    zw.push_back({"conv.backward", "all_reduce", "domain", 1, all_reduce_bytes(2 * 2 * 3 + 2, 8, p)});
    check_ledger(line, zw);
    ShardedCase zt = sharded_case("conv_transpose1d zero-size shard", {x}, {on_line(Placement::Shard(2))},
                                  {{e.extents}});
    zt.params = {rnd({2, 2, 2}, 147), rnd({2}, 150)};
    line.flat().ledger().reset();
    const ShardedCheckResult ztr = check_sharded(line, conv_transpose_fn, zt);
    INFO(ztr.report);
    CHECK(ztr.ok);
    check_ledger(line, {{"conv_transpose.backward", "all_reduce", "domain", 1, all_reduce_bytes(2 * 2 * 2 + 2, 8, p)}});
    std::vector<int64_t> doubled = e.extents;  // patchify needs extents that are multiples of the stride
    int64_t total = 0;
    for (int64_t& v : doubled) total += (v *= 2);
    ShardedCase zp = sharded_case("conv1d patchify zero-size shard", {rnd({1, 2, total}, 151)},
                                  {on_line(Placement::Shard(2))}, {{doubled}});
    zp.params = {rnd({3, 2, 2}, 152), rnd({3}, 153)};
    line.flat().ledger().reset();
    const ShardedCheckResult zpr = check_sharded(line, conv_fn({2}, {0}, {1}), zp);
    INFO(zpr.report);
    CHECK(zpr.ok);
    check_ledger(line, {{"conv.backward", "all_reduce", "domain", 1, all_reduce_bytes(3 * 2 * 2 + 3, 8, p)}});
  }
}

TEST_CASE("patch conv: bad arguments are the local op's error on every rank, before any plan or collective",
          "[patch][conv]") {
  const Mesh& line = line_mesh();
  const Tensor x = rnd({1, 2, 13}, 160), xi = iota({1, 2, 13}, DType::i64);
  for (const ExtentsCase& e : extents_cases(13, line.size())) {
    INFO("1-D mesh, " << e.name << " extents");
    const ShardTensor xs = distribute(x, line, on_line(S(2)), AxisExtents{e.extents});
    check_rejected(conv1d_bad_inputs(x, xs, xi, distribute(xi, line, on_line(S(2)), AxisExtents{e.extents})));
    // The job goes on: a halo conv on the same layout (its collectives pair up on every rank).
    ShardedCase ok = sharded_case("conv1d after the bad inputs", {x}, {on_line(S(2))}, {{e.extents}});
    ok.params = {rnd({2, 2, 3}, 161), rnd({2}, 162)};
    line.flat().ledger().reset();
    const ShardedCheckResult r = check_sharded(line, conv_fn({1}, {1}, {1}), ok);
    INFO(r.report);
    CHECK(r.ok);
    std::vector<ExpectedComm> want = halo_or_general("conv", "domain", e.extents, 1, 1, line.rank(), 2 * 8);
    want.push_back({"conv.backward", "all_reduce", "domain", 1, all_reduce_bytes(2 * 2 * 3 + 2, 8, line.size())});
    check_ledger(line, want);
  }
  if (!has_grid()) return;
  const Tensor x2 = rnd({1, 2, 9, 7}, 174);
  for (const AxisExtents& ext : grid_extents(9, 7)) {
    const ShardTensor xs = distribute(x2, grid_mesh(), {S(2), S(3)}, ext);
    check_rejected(conv2d_bad_inputs(x2, xs));
    ShardedCase ok = sharded_case("conv2d 2x2 after the bad inputs", {x2}, {{S(2), S(3)}}, {ext});
    ok.params = {rnd({3, 2, 3, 3}, 171), rnd({3}, 172)};
    // H over dx first, on the local block (one slice: 2 * ew f64), by the neighbour exchange or (the zero-size
    // shard) the general halo; then W over dy on the H-padded block: eh + 2 rows (halo or zero padding on each
    // side), or the K = 3 edge-filled rows of a coordinate without output.
    const int cx = grid_mesh().coord("dx"), cy = grid_mesh().coord("dy");
    const int64_t eh = ext[0][cx], ew = ext[1][cy];
    const int64_t rows = eh == 0 ? 3 : eh + 2;
    const int64_t wb = all_reduce_bytes(3 * 2 * 9 + 3, 8, 2);
    std::vector<ExpectedComm> want = halo_or_general("conv", "dx", ext[0], 1, 1, cx, 2 * ew * 8);
    for (const ExpectedComm& e : halo_or_general("conv", "dy", ext[1], 1, 1, cy, 2 * rows * 8)) want.push_back(e);
    want.push_back({"conv.backward", "all_reduce", "dx", 1, wb});
    want.push_back({"conv.backward", "all_reduce", "dy", 1, wb});
    check_patch(grid_mesh(), conv_fn({1}, {1}, {1}), ok, want);
  }
}

// ---- configurations the contract accepts, each with its exact collectives (issue 9) ----------------------------

TEST_CASE("patch conv: batch dim sharded, no halo, any stride; the w|b grads reduced once", "[patch][conv]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (const ExtentsCase& e : extents_cases(5, p)) {
    ShardedCase c = sharded_case("conv1d batch sharded " + e.name, {rnd({5, 2, 9}, 180)}, {on_line(S(0))},
                                 {{e.extents}});
    c.params = {rnd({3, 2, 3}, 181), rnd({3}, 182)};
    check_patch(line, conv_fn({1}, {1}, {1}), c,
                {{"conv.backward", "all_reduce", "domain", 1, all_reduce_bytes(3 * 2 * 3 + 3, 8, p)}});
    // The spatial dims are whole on every rank: stride 2 and dilation 2 are the local op's.
    ShardedCase s = sharded_case("conv2d batch sharded, stride 2, dilation 2 " + e.name, {rnd({5, 2, 9, 8}, 183)},
                                 {on_line(S(0))}, {{e.extents}});
    s.params = {rnd({3, 2, 3, 3}, 184), rnd({3}, 185)};
    check_patch(line, conv_fn({2}, {1}, {2}), s,
                {{"conv.backward", "all_reduce", "domain", 1, all_reduce_bytes(3 * 2 * 9 + 3, 8, p)}});
  }
}

TEST_CASE("patch conv: conv1d (batch x L) and conv3d (D x H) on the 2x2 mesh", "[patch][conv]") {
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  const int cx = grid.coord("dx"), cy = grid.coord("dy");
  // conv1d: batch over dx (uneven, and a zero-size batch shard), L over dy; the halo slice along L is the local
  // batch's B x C values.
  for (const Extents& eb : {split_extents(3, 2), Extents{0, 3}}) {
    ShardedCase c = sharded_case("conv1d 2x2 batch " + std::to_string(eb[0]) + "|" + std::to_string(eb[1]),
                                 {rnd({3, 2, 11}, 186)}, {{S(0), S(2)}}, {{eb, split_extents(11, 2)}});
    c.params = {rnd({3, 2, 3}, 187), rnd({3}, 188)};
    const int64_t wb = all_reduce_bytes(3 * 2 * 3 + 3, 8, 2);
    std::vector<ExpectedComm> want = halo_comms("dy", halo_bytes(cy, 2, 1, eb[cx] * 2 * 8), wb);
    want.push_back({"conv.backward", "all_reduce", "dx", 1, wb});
    check_patch(grid, conv_fn({1}, {1}, {1}), c, want);
  }
  // conv3d: D over dx first, on the local block (slice 2 * eh * W); then H over dy on the D-padded block, whose
  // D extent is ed + h + pad (the halo on the inner side, the zero padding at the global edge).
  for (int64_t pad : {1, 0}) {
    ShardedCase c = sharded_case("conv3d 2x2 pad " + std::to_string(pad), {rnd({1, 2, 7, 6, 3}, 189)},
                                 {{S(2), S(3)}});
    c.params = {rnd({2, 2, 3, 3, 3}, 190), rnd({2}, 191)};
    const int64_t ed = split_extents(7, 2)[cx], eh = split_extents(6, 2)[cy];
    const int64_t wb = all_reduce_bytes(2 * 2 * 27 + 2, 8, 2);
    std::vector<ExpectedComm> want = halo_comms("dx", 2 * eh * 3 * 8, wb);
    for (const ExpectedComm& e : halo_comms("dy", 2 * (ed + 1 + pad) * 3 * 8, wb)) want.push_back(e);
    check_patch(grid, conv_fn({1}, {pad}, {1}), c, want);
  }
}

TEST_CASE("patch conv: dilation 2 and kernel 5 (halo 2) on the 2x2 mesh", "[patch][conv]") {
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  struct Cfg {
    const char* name;
    int64_t k, pad, dil;
  };
  const int64_t eh = split_extents(11, 2)[grid.coord("dx")], ew = split_extents(12, 2)[grid.coord("dy")];
  for (const Cfg& cfg : {Cfg{"k3 d2 p2", 3, 2, 2}, Cfg{"k5 p2", 5, 2, 1}, Cfg{"k5 p1", 5, 1, 1}}) {
    const int64_t h = cfg.dil * (cfg.k - 1) / 2;
    ShardedCase c = sharded_case(std::string("conv2d 2x2 ") + cfg.name, {rnd({1, 2, 11, 12}, 192)}, {{S(2), S(3)}});
    c.params = {rnd({3, 2, cfg.k, cfg.k}, 193), rnd({3}, 194)};
    // H: h slices of the local block (2 * ew each); W: h slices of the H-padded block (2 * (eh + h + pad) each).
    const int64_t wb = all_reduce_bytes(3 * 2 * cfg.k * cfg.k + 3, 8, 2);
    std::vector<ExpectedComm> want = halo_comms("dx", h * 2 * ew * 8, wb);
    for (const ExpectedComm& e : halo_comms("dy", h * 2 * (eh + h + cfg.pad) * 8, wb)) want.push_back(e);
    check_patch(grid, conv_fn({1}, {cfg.pad}, {cfg.dil}), c, want);
  }
}
