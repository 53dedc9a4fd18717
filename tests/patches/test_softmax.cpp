// Softmax patches against the serial fp64 oracle: softmax/log_softmax over the sharded dim need two all-reduces
// forward and one backward, over an unsharded dim none.
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

std::vector<ShardTensor> softmaxes(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  const ShardTensor& x = in[0];
  return {softmax(x, 1), log_softmax(x, 1), softmax(x, 2), log_softmax(x, -1)};
}

}  // namespace

TEST_CASE("patch softmax/log_softmax: over the sharded dim two all-reduces forward, one backward", "[patch]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const int64_t rows = 2 * 3;  // the (2, 3) rows of dim 1
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c =
        sharded_case("softmax " + e.name, {rnd({2, 11, 3}, 56)}, {on_line(Placement::Shard(1))}, {{e.extents}});
    const int64_t b = all_reduce_bytes(rows, 8, p);
    check_patch(line, softmaxes, c,
                {{"softmax.forward", "all_reduce", "domain", 2, 2 * b},
                 {"softmax.backward", "all_reduce", "domain", 1, b},
                 {"log_softmax.forward", "all_reduce", "domain", 2, 2 * b},
                 {"log_softmax.backward", "all_reduce", "domain", 1, b}});
  }
  if (has_grid()) {
    // Over dim 0 (dx) and dim 1 (dy): the rows are this rank's (dy extent, 3) and (dx extent, 3).
    auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      return std::vector<ShardTensor>{softmax(in[0], 0), log_softmax(in[0], 1)};
    };
    const Mesh& grid = grid_mesh();
    for (const auto& ext : grid_extents(5, 7)) {
      const int64_t bx = all_reduce_bytes(ext[1][grid.coord("dy")] * 3, 8, 2);
      const int64_t by = all_reduce_bytes(ext[0][grid.coord("dx")] * 3, 8, 2);
      ShardedCase c = sharded_case("softmax 2x2", {rnd({5, 7, 3}, 57)}, {kGridS0S1}, {ext});
      check_patch(grid, fn, c,
                  {{"softmax.forward", "all_reduce", "dx", 2, 2 * bx},
                   {"softmax.backward", "all_reduce", "dx", 1, bx},
                   {"log_softmax.forward", "all_reduce", "dy", 2, 2 * by},
                   {"log_softmax.backward", "all_reduce", "dy", 1, by}});
    }
  }
}

TEST_CASE("patch softmax: a Partial input is MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const ShardTensor x = distribute(rnd({2, 11, 3}, 58), line, on_line(Placement::Shard(1)));
  const ShardTensor partial = sum(x, {1});
  CHECK_THROWS_WITH(softmax(partial, 1), Catch::Contains("softmax") && Catch::Contains("(P)"));
  CHECK_THROWS_AS(log_softmax(partial, 0), MissingShardPatch);
}
