// View patches against the serial fp64 oracle. Views move sharded dims around without any collective and keep their
// per-rank extents; a sharded dim may merge with the unsharded dims right after it (extents scale up) or split
// into a leading part and trailing dims that divide every extent; other merges and splits are refused.
#include "tests/patches/bad_input_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// Every view op on x (A, N, 6) sharded along N (and along A on the 2x2 mesh); y is x's twin for cat.
std::vector<ShardTensor> all_views(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  const ShardTensor& x = in[0];
  const int64_t a = x.global_shape()[0], n = x.global_shape()[1];
  return {reshape(x, {a, n, 2, 3}), reshape(x, {1, a, n, -1}), view(x, {a, n, 3, 2}), permute(x, {2, 0, 1}),
          transpose(x, 0, 1),       unsqueeze(x, 1),           unsqueeze(x, -1),      squeeze(unsqueeze(x, 0), 0),
          select(x, 2, 4),          select(x, -1, 0),          cat({x, in[1]}, 2)};
}

}  // namespace

TEST_CASE("patch views: sharded dims move with their extents, no collectives", "[patch]") {
  const Mesh& line = line_mesh();
  const ShardTensor x = distribute(rnd({2, 11, 6}, 60), line, on_line(Placement::Shard(1)));
  const ShardTensor p = permute(x, {2, 0, 1});
  CHECK(p.placements()[0] == Placement::Shard(2));
  CHECK(p.spec().extents(0) == x.spec().extents(0));
  CHECK(reshape(x, {1, 2, 11, 6}).placements()[0] == Placement::Shard(2));
  CHECK(transpose(x, 1, 2).placements()[0] == Placement::Shard(2));
  CHECK(select(x, 0, 1).placements()[0] == Placement::Shard(0));

  const Placements s1 = on_line(Placement::Shard(1));
  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    ShardedCase c = sharded_case("views " + e.name, {rnd({2, 11, 6}, 61), rnd({2, 11, 4}, 62)}, {s1, s1},
                                 {{e.extents}, {e.extents}});
    check_patch(line, all_views, c, {});
  }
  if (has_grid())
    for (const auto& ext : grid_extents(5, 7)) {
      ShardedCase c =
          sharded_case("views 2x2", {rnd({5, 7, 6}, 63), rnd({5, 7, 4}, 64)}, {kGridS0S1, kGridS0S1}, {ext, ext});
      check_patch(grid_mesh(), all_views, c, {});
    }
}

TEST_CASE("patch reshape: a sharded dim merges with the dims after it and splits back, no collectives", "[patch]") {
  // x (2, 7, 3, 4): rows sharded (the image rows of a ViT or a structured FLARE input), flattened to tokens
  // (2, 21, 4) and back, and a split of the merged dim with other trailing sizes.
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const ShardTensor tokens = reshape(in[0], {2, 21, 4});
    return std::vector<ShardTensor>{tokens, view(tokens, {2, 7, 3, 4}), reshape(in[0], {2, 7, 12}),
                                    reshape(in[0], {2, 84}), reshape(reshape(in[0], {2, 84}), {2, 7, 3, 2, 2})};
  };
  const Mesh& line = line_mesh();
  const ShardTensor x = distribute(rnd({2, 7, 3, 4}, 67), line, on_line(S(1)));
  const ShardTensor t = reshape(x, {2, 21, 4});
  CHECK(t.placements()[0] == S(1));
  std::vector<int64_t> want = x.spec().extents(0);
  for (int64_t& e : want) e *= 3;
  CHECK(t.spec().extents(0) == want);
  for (const ExtentsCase& e : extents_cases(7, line.size())) {
    ShardedCase c = sharded_case("reshape merge/split " + e.name, {rnd({2, 7, 3, 4}, 68)}, {on_line(S(1))},
                                 {{e.extents}});
    check_patch(line, fn, c, {});
  }
  if (has_grid())  // batch over one axis, rows over the other
    for (const auto& ext : grid_extents(2, 7)) {
      ShardedCase c = sharded_case("reshape merge 2x2", {rnd({2, 7, 3, 4}, 69)}, {kGridS0S1}, {ext});
      check_patch(grid_mesh(), fn, c, {});
    }
}

TEST_CASE("patch views: merging, splitting or removing a sharded dim is MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const ShardTensor x = distribute(rnd({2, 11, 6}, 65), line, on_line(Placement::Shard(1)));
  // merged behind an unsharded dim: ranks' blocks would interleave
  CHECK_THROWS_WITH(reshape(x, {22, 6}), Catch::Contains("reshape") && Catch::Contains("S(1)"));
  CHECK_THROWS_AS(reshape(x, {2, 33, 2}), MissingShardPatch);
  // a split whose trailing product (3) does not divide every rank's extent
  const ShardTensor y = distribute(rnd({2, 12, 2}, 70), line, on_line(S(1)), AxisExtents{split_around_zero(12, line.size())});
  bool divisible = true;
  for (int64_t e : y.spec().extents(0)) divisible &= e % 3 == 0;
  if (!divisible) CHECK_THROWS_AS(reshape(y, {2, 4, 3, 2}), MissingShardPatch);
  CHECK_THROWS_AS(select(x, 1, 0), MissingShardPatch);
  CHECK_THROWS_AS(cat({x, x}, 1), MissingShardPatch);
  CHECK_THROWS_AS(permute(sum(x, {1}), {1, 0}), MissingShardPatch);
  if (line.size() >= 2) {
    ExtentMismatchScope strict(ExtentMismatch::raise);  // by default y is aligned (tests/patches/test_align.cpp)
    std::vector<int64_t> other = split_extents(11, line.size());
    other[0] += 1, other[1] -= 1;
    const ShardTensor y =
        distribute(rnd({2, 11, 6}, 66), line, on_line(Placement::Shard(1)), AxisExtents{other});
    CHECK_THROWS_AS(cat({x, y}, 2), MissingShardPatch);
  }
}

TEST_CASE("patch split/expand: along unsharded dims, sharded dims keep their extents, no collectives", "[patch]") {
  // x (2, 11, 6) sharded on N; split along dims 2 and 0; y (2, 11, 1) expanded along its last dim and with two new
  // leading dims (-1 keeps a size).
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    std::vector<ShardTensor> out = split(in[0], {1, 3, 2}, 2);
    for (const ShardTensor& part : split(in[0], {2, 0}, 0)) out.push_back(part);
    out.push_back(expand(in[1], {2, 11, 4}));
    out.push_back(expand(in[1], {3, 1, -1, -1, 5}));
    return out;
  };
  const Mesh& line = line_mesh();
  const ShardTensor x = distribute(rnd({2, 11, 6}, 100), line, on_line(S(1)));
  const std::vector<ShardTensor> parts = split(x, {4, 2}, -1);
  REQUIRE(parts.size() == 2);
  CHECK(parts[1].global_shape() == Shape{2, 11, 2});
  CHECK(parts[1].placements()[0] == S(1));
  CHECK(parts[1].spec().extents(0) == x.spec().extents(0));
  const ShardTensor y = distribute(rnd({2, 11, 1}, 101), line, on_line(S(1)));
  const ShardTensor ey = expand(y, {3, 2, 11, 5});
  CHECK(ey.global_shape() == Shape{3, 2, 11, 5});
  CHECK(ey.placements()[0] == S(2));
  CHECK(ey.spec().extents(0) == y.spec().extents(0));

  const Placements s1 = on_line(S(1));
  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    ShardedCase c = sharded_case("split/expand " + e.name, {rnd({2, 11, 6}, 102), rnd({2, 11, 1}, 103)}, {s1, s1},
                                 {{e.extents}, {e.extents}});
    check_patch(line, fn, c, {});
  }
  if (has_grid()) {
    // x (5, 7, 6) and y (5, 7, 1), both dims sharded.
    auto fn2 = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      std::vector<ShardTensor> out = split(in[0], {5, 1}, 2);
      out.push_back(expand(in[1], {2, 5, 7, 3}));
      return out;
    };
    for (const auto& ext : grid_extents(5, 7)) {
      ShardedCase c =
          sharded_case("split/expand 2x2", {rnd({5, 7, 6}, 104), rnd({5, 7, 1}, 105)}, {kGridS0S1, kGridS0S1}, {ext, ext});
      check_patch(grid_mesh(), fn2, c, {});
    }
  }
}

TEST_CASE("patch split/expand: bad sizes are the local op's error; a sharded dim is MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor x = rnd({2, 11, 6}, 106);
  const ShardTensor xs = distribute(x, line, on_line(S(1)));
  // A sharded dim of global size 1 (one rank holds it, the others nothing): expanding it would change its size.
  Extents one(static_cast<size_t>(line.size()), 0);
  one.back() = 1;
  const Tensor t = rnd({1, 3}, 107);
  const ShardTensor ts = distribute(t, line, on_line(S(0)), AxisExtents{one});
  check_rejected({
      rejects<ShapeError>("split sizes that do not add up", "split: part sizes [1, 2] add up to 3",
                          [=] { (void)split(xs, {1, 2}, 2); }, [=] { (void)split(x, {1, 2}, 2); }),
      rejects<ShapeError>("expand to a smaller dim", "expand: cannot expand", [=] { (void)expand(xs, {2, 11, 3}); },
                          [=] { (void)expand(x, {2, 11, 3}); }),
      rejects<MissingShardPatch>("split along the sharded dim", "split: no patch for placements (S(1))",
                                 [=] { (void)split(xs, {5, 6}, 1); }),
      rejects<MissingShardPatch>("expand of a sharded dim", "expand: no patch for placements (S(0))",
                                 [=] { (void)expand(ts, {4, 3}); }),
      rejects<MissingShardPatch>("split of a pending sum", "split: no patch", [=] { (void)split(sum(xs, {1}), {1, 1}, 0); }),
  });
}
