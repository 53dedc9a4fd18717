// Elementwise patches against the serial fp64 oracle: unary ops and activations, binary ops of equally sharded
// operands, and replicated operands (plain parameters and Replicate ShardTensors) broadcast against shards, whose
// grads must be all-reduced exactly once per sharded axis.
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// Values in [1.8, 2.2]: safe divisors.
Tensor divisor(const Shape& shape, uint64_t seed) { return add_scalar(mul_scalar(rnd(shape, seed), 0.1), 2.0); }

// The extents of an input sharded on both axes of the 2x2 mesh: dim 0 by "dx", dim 1 by "dy".
struct GridCase {
  std::string name;
  std::vector<int64_t> dx, dy;
};
std::vector<GridCase> grid_cases(int64_t len0, int64_t len1) {
  // The zero-size shard sits on dx; dy, split on both coordinates, keeps the input really sharded.
  return {{"uneven", split_extents(len0, 2), split_extents(len1, 2)},
          {"zero-size shard", {0, len0}, split_extents(len1, 2)}};
}

std::vector<ShardTensor> all_unary(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  const ShardTensor& x = in[0];
  return {neg(x),
          exp(x),
          tanh(x),
          relu(x),
          gelu(x),
          gelu(x, GeluApprox::tanh),
          silu(x),
          sigmoid(x),
          add_scalar(x, 0.5),
          mul_scalar(x, -2.0)};
}

std::vector<ShardTensor> all_binary(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  return {add(in[0], in[1]), sub(in[0], in[1]), mul(in[0], in[1]), div(in[0], in[1])};
}

}  // namespace

TEST_CASE("patch elementwise: unary ops and activations keep any sharding, no collectives", "[patch]") {
  const Mesh& line = line_mesh();
  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    ShardedCase c = sharded_case("unary " + e.name, {rnd({11, 3}, 1)}, {on_line(Placement::Shard(0))}, {{e.extents}});
    check_patch(line, all_unary, c, {});
  }
  if (has_grid())
    for (const GridCase& g : grid_cases(5, 7)) {
      ShardedCase c = sharded_case("unary 2x2 " + g.name, {rnd({5, 7}, 2)}, {kGridS0S1}, {{g.dx, g.dy}});
      check_patch(grid_mesh(), all_unary, c, {});
    }
}

TEST_CASE("patch elementwise: binary ops of equally sharded operands, no collectives", "[patch]") {
  const Mesh& line = line_mesh();
  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    const Placements s0 = on_line(Placement::Shard(0));
    ShardedCase c =
        sharded_case("binary " + e.name, {rnd({11, 3}, 3), divisor({11, 3}, 4)}, {s0, s0}, {{e.extents}, {e.extents}});
    check_patch(line, all_binary, c, {});
  }
  if (has_grid())
    for (const GridCase& g : grid_cases(5, 7)) {
      ShardedCase c = sharded_case("binary 2x2 " + g.name, {rnd({5, 7}, 5), divisor({5, 7}, 6)}, {kGridS0S1, kGridS0S1},
                                   {{g.dx, g.dy}, {g.dx, g.dy}});
      check_patch(grid_mesh(), all_binary, c, {});
    }
}

TEST_CASE("patch elementwise: plain parameters broadcast against shards; their grads reduced once per axis",
          "[patch]") {
  // bias (4) and scale (1, 1, 4): broadcast over every dim but the features.
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    return std::vector<ShardTensor>{add(in[0], p[0]), mul(in[0], p[1])};
  };
  const std::vector<Tensor> params = {rnd({4}, 7), rnd({1, 1, 4}, 8)};
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c =
        sharded_case("params " + e.name, {rnd({2, 11, 4}, 9)}, {on_line(Placement::Shard(1))}, {{e.extents}});
    c.params = params;
    check_patch(line, fn, c,
                {{"add.backward", "all_reduce", "domain", 1, all_reduce_bytes(4, 8, p)},
                 {"mul.backward", "all_reduce", "domain", 1, all_reduce_bytes(4, 8, p)}});
  }
  if (has_grid())
    for (const GridCase& g : grid_cases(5, 7)) {
      ShardedCase c = sharded_case("params 2x2 " + g.name, {rnd({5, 7, 4}, 10)}, {kGridS0S1}, {{g.dx, g.dy}});
      c.params = params;
      const int64_t b = all_reduce_bytes(4, 8, 2);
      check_patch(grid_mesh(), fn, c,
                  {{"add.backward", "all_reduce", "dx", 1, b},
                   {"add.backward", "all_reduce", "dy", 1, b},
                   {"mul.backward", "all_reduce", "dx", 1, b},
                   {"mul.backward", "all_reduce", "dy", 1, b}});
    }
}

TEST_CASE("patch elementwise: Replicate ShardTensor operands broadcast against shards, on either side", "[patch]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (const ExtentsCase& e : extents_cases(11, p)) {
    // b (1, 3) is Replicate and requires grad: partial over "domain" in each op.
    auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      return std::vector<ShardTensor>{mul(in[0], in[1]), sub(in[1], in[0]), div(in[0], in[1])};
    };
    ShardedCase c = sharded_case("replicated operand " + e.name, {rnd({11, 3}, 11), divisor({1, 3}, 12)},
                                 {on_line(Placement::Shard(0)), on_line(Placement::Replicate())}, {{e.extents}, {}});
    const int64_t b = all_reduce_bytes(3, 8, p);
    check_patch(line, fn, c,
                {{"mul.backward", "all_reduce", "domain", 1, b},
                 {"sub.backward", "all_reduce", "domain", 1, b},
                 {"div.backward", "all_reduce", "domain", 1, b}});
  }
  if (has_grid())
    for (const GridCase& g : grid_cases(5, 7)) {
      // a (5, 7) on both axes; b (1, 7) sharded like a on dy, Replicate on dx (its grad reduced over dx only);
      // c (5, 1) sharded like a on dx, Replicate on dy (reduced over dy only).
      auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
        return std::vector<ShardTensor>{mul(in[0], in[1]), add(in[2], in[0])};
      };
      ShardedCase c = sharded_case(
          "replicated operand 2x2 " + g.name, {rnd({5, 7}, 13), rnd({1, 7}, 14), rnd({5, 1}, 15)},
          {kGridS0S1, {Placement::Replicate(), Placement::Shard(1)}, {Placement::Shard(0), Placement::Replicate()}},
          {{g.dx, g.dy}, {{}, g.dy}, {g.dx, {}}});
      const Mesh& grid = grid_mesh();
      const int64_t my_dy = g.dy[grid.coord("dy")], my_dx = g.dx[grid.coord("dx")];
      check_patch(grid, fn, c,
                  {{"mul.backward", "all_reduce", "dx", 1, all_reduce_bytes(my_dy, 8, 2)},
                   {"add.backward", "all_reduce", "dy", 1, all_reduce_bytes(my_dx, 8, 2)}});
    }
}

TEST_CASE("patch elementwise: unsupported placements are MissingShardPatch naming the op and placements", "[patch]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const Tensor full = rnd({11, 3}, 16);
  const ShardTensor a = distribute(full, line, on_line(Placement::Shard(0)));
  // Replicate with the whole sharded dim: it would need slicing, which no elementwise patch does.
  const ShardTensor whole = distribute(full, line, on_line(Placement::Replicate()));
  CHECK_THROWS_AS(mul(a, whole), MissingShardPatch);
  CHECK_THROWS_WITH(add(a, full), Catch::Contains("add") && Catch::Contains("S(0)") && Catch::Contains("R"));
  // Shards of different dims.
  const ShardTensor b = distribute(rnd({11, 3}, 17), line, on_line(Placement::Shard(1)));
  CHECK_THROWS_AS(sub(a, b), MissingShardPatch);
  // The same dim with other extents, under the strict policy (by default b is aligned: tests/patches/test_align.cpp).
  if (p >= 2) {
    ExtentMismatchScope strict(ExtentMismatch::raise);
    std::vector<int64_t> other = split_extents(11, p);
    other[0] += 1, other[1] -= 1;
    const ShardTensor c =
        distribute(full, line, on_line(Placement::Shard(0)), AxisExtents{other});
    CHECK_THROWS_AS(add(a, c), MissingShardPatch);
  }
  // A pending sum: no elementwise op of one is the op of the sum.
  const ShardTensor partial = sum(a, {0});
  REQUIRE(partial.placements()[0].is_partial());
  CHECK_THROWS_WITH(exp(partial), Catch::Contains("exp") && Catch::Contains("P"));
  CHECK_THROWS_AS(mul(partial, partial), MissingShardPatch);
}
