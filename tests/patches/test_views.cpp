// View patches against the serial fp64 oracle. Views move sharded dims around without any collective and keep their
// per-rank extents; reshapes that would merge or split a sharded dim are refused.
#include "tests/patches/patch_testing.h"

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

TEST_CASE("patch views: merging, splitting or removing a sharded dim is MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const ShardTensor x = distribute(rnd({2, 11, 6}, 65), line, on_line(Placement::Shard(1)));
  CHECK_THROWS_WITH(reshape(x, {22, 6}), Catch::Contains("reshape") && Catch::Contains("S(1)"));
  CHECK_THROWS_AS(reshape(x, {2, 66}), MissingShardPatch);
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
