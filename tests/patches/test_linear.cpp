// Linear patch against the serial fp64 oracle: rows sharded on any non-feature dim (1-D and 2x2 meshes, uneven and
// zero-size shards), every parameter grad compared, and exactly one all-reduce of the packed weight+bias grad per
// sharded axis in backward, none in forward.
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

std::vector<ShardTensor> linear_fn(const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
  return {linear(in[0], p[0], p.size() > 1 ? p[1] : Tensor())};
}

}  // namespace

TEST_CASE("patch linear: rows sharded on any non-feature dim; weight+bias grads all-reduced once per axis", "[patch]") {
  const std::vector<Tensor> params = {rnd({4, 3}, 20), rnd({4}, 21)};
  const Mesh& line = line_mesh();
  const int p = line.size();
  const int64_t wb = all_reduce_bytes(4 * 3 + 4, 8, p);  // one packed buffer: weight then bias
  for (const ExtentsCase& e : extents_cases(11, p)) {
    // (B, N, C) sharded along the points, and (N, C) along the rows.
    ShardedCase points =
        sharded_case("linear S(1) " + e.name, {rnd({2, 11, 3}, 22)}, {on_line(Placement::Shard(1))}, {{e.extents}});
    points.params = params;
    check_patch(line, linear_fn, points, {{"linear.backward", "all_reduce", "domain", 1, wb}});
    ShardedCase rows =
        sharded_case("linear S(0) " + e.name, {rnd({11, 3}, 23)}, {on_line(Placement::Shard(0))}, {{e.extents}});
    rows.params = params;
    check_patch(line, linear_fn, rows, {{"linear.backward", "all_reduce", "domain", 1, wb}});
  }
  // Without a bias only the weight travels.
  ShardedCase no_bias = sharded_case("linear without bias", {rnd({11, 3}, 24)}, {on_line(Placement::Shard(0))});
  no_bias.params = {params[0]};
  check_patch(line, linear_fn, no_bias, {{"linear.backward", "all_reduce", "domain", 1, all_reduce_bytes(12, 8, p)}});
  if (has_grid())
    for (const auto& ext : grid_extents(5, 7)) {
      ShardedCase c = sharded_case("linear 2x2", {rnd({5, 7, 3}, 25)}, {kGridS0S1}, {ext});
      c.params = params;
      const int64_t b = all_reduce_bytes(16, 8, 2);
      check_patch(grid_mesh(), linear_fn, c,
                  {{"linear.backward", "all_reduce", "dx", 1, b}, {"linear.backward", "all_reduce", "dy", 1, b}});
    }
}

TEST_CASE("patch linear: f32 grads are reduced in f32", "[patch]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  ShardedCase c = sharded_case("linear f32", {rnd({11, 3}, 26).to(DType::f32)}, {on_line(Placement::Shard(0))});
  c.params = {rnd({4, 3}, 27).to(DType::f32), rnd({4}, 28).to(DType::f32)};
  c.atol = c.rtol = 1e-5;  // f32 against the f64 oracle
  check_patch(line, linear_fn, c, {{"linear.backward", "all_reduce", "domain", 1, all_reduce_bytes(16, 4, p)}});
}

TEST_CASE("patch linear: a parameter used on replicated data is not reduced for that use", "[patch]") {
  // The same weight meets a replicated x (complete grad already) and a sharded y (partial grad): only y's
  // contribution is all-reduced, once.
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    return std::vector<ShardTensor>{linear(in[0], p[0], p[1]), linear(in[1], p[0], p[1])};
  };
  const Mesh& line = line_mesh();
  const int p = line.size();
  ShardedCase c = sharded_case("linear replicated + sharded", {rnd({5, 3}, 29), rnd({11, 3}, 30)},
                               {on_line(Placement::Replicate()), on_line(Placement::Shard(0))});
  c.params = {rnd({4, 3}, 31), rnd({4}, 32)};
  check_patch(line, fn, c, {{"linear.backward", "all_reduce", "domain", 1, all_reduce_bytes(16, 8, p)}});
}

TEST_CASE("patch linear: sharded features or Partial input are MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor w = rnd({4, 3}, 40), b = rnd({4}, 41);
  const ShardTensor features = distribute(rnd({5, 3}, 43), line, on_line(Placement::Shard(1)));
  CHECK_THROWS_WITH(linear(features, w, b), Catch::Contains("linear") && Catch::Contains("S(1)"));
  const ShardTensor rows = distribute(rnd({2, 5, 3}, 44), line, on_line(Placement::Shard(1)));
  const ShardTensor partial = sum(rows, {1});
  CHECK_THROWS_AS(linear(partial, w, b), MissingShardPatch);
}
