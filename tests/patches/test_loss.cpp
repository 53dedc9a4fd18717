// Loss patches against the serial fp64 oracle. Losses over sharded data all-reduce their partial sums once per
// sharded axis in forward and run a local backward.
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

std::vector<ShardTensor> losses(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  return {mse_loss(in[0], in[1]), relative_l2_loss(in[0], in[1])};
}

}  // namespace

TEST_CASE("patch losses: one all-reduce of the partial sums per sharded axis forward, local backward", "[patch]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const Placements s1 = on_line(Placement::Shard(1));
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c = sharded_case("losses " + e.name, {rnd({2, 11, 3}, 67), rnd({2, 11, 3}, 68)}, {s1, s1},
                                 {{e.extents}, {e.extents}});
    check_patch(line, losses, c,
                {{"mse_loss.forward", "all_reduce", "domain", 1, all_reduce_bytes(1, 8, p)},
                 {"relative_l2_loss.forward", "all_reduce", "domain", 1, all_reduce_bytes(2, 8, p)}});
  }
  if (has_grid())
    for (const auto& ext : grid_extents(5, 7)) {
      ShardedCase c =
          sharded_case("losses 2x2", {rnd({5, 7, 3}, 69), rnd({5, 7, 3}, 70)}, {kGridS0S1, kGridS0S1}, {ext, ext});
      const int64_t b1 = all_reduce_bytes(1, 8, 2), b2 = all_reduce_bytes(2, 8, 2);
      check_patch(grid_mesh(), losses, c,
                  {{"mse_loss.forward", "all_reduce", "dx", 1, b1},
                   {"mse_loss.forward", "all_reduce", "dy", 1, b1},
                   {"relative_l2_loss.forward", "all_reduce", "dx", 1, b2},
                   {"relative_l2_loss.forward", "all_reduce", "dy", 1, b2}});
    }
}

TEST_CASE("patch losses: differing specs or a Partial input are MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor full = rnd({2, 11, 3}, 71);
  const ShardTensor x = distribute(full, line, on_line(Placement::Shard(1)));
  const ShardTensor r = distribute(full, line, on_line(Placement::Replicate()));
  CHECK_THROWS_WITH(mse_loss(x, r), Catch::Contains("mse_loss") && Catch::Contains("S(1)"));
  CHECK_THROWS_AS(relative_l2_loss(r, x), MissingShardPatch);
  const ShardTensor partial = sum(x, {1});
  CHECK_THROWS_AS(mse_loss(partial, partial), MissingShardPatch);
}
