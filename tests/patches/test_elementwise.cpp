// Elementwise patches against the serial fp64 oracle: unary ops and activations, binary ops of equally sharded
// operands, and replicated operands (plain parameters and Replicate ShardTensors) broadcast against shards, whose
// grads must be all-reduced exactly once per sharded axis.
#include <algorithm>
#include <cmath>

#include "tests/patches/bad_input_testing.h"

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

namespace {

// Values in [0.7, 1.3]: inputs of log, sqrt, rsqrt and pow, and bases with a defined grad of the exponent.
Tensor positive(const Shape& shape, uint64_t seed) { return add_scalar(mul_scalar(rnd(shape, seed), 0.1), 1.0); }

// Integer values in [-2, 2]: equal elements across operands, so eq/le/ge and lt/gt tell ties apart.
Tensor with_ties_2d(const Shape& shape, uint64_t seed) {
  std::vector<double> v = rnd(shape, seed).to_vector();
  for (double& e : v) e = std::max(-2.0, std::min(2.0, std::round(e)));
  return from_vector(v, shape, {DType::f64});
}

// x is positive (see above); the ops that need it take x, the others x - 1 (values around 0, both signs).
std::vector<ShardTensor> more_unary(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  const ShardTensor& x = in[0];
  const ShardTensor c = add_scalar(x, -1.0);
  return {log(x),         sqrt(x),          rsqrt(x),  pow_scalar(x, 2.5), erf(c),
          abs(c),         clamp(c, -0.05, 0.05), to_dtype(to_dtype(x, DType::f32), DType::f64)};
}

std::vector<ShardTensor> more_binary(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  return {pow(in[0], in[1]), maximum(in[0], in[1]), minimum(in[0], in[1])};
}

// Every binary op with a plain Tensor parameter on the right, then on the left.
std::vector<ShardTensor> with_plain_tensors(const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
  const ShardTensor& x = in[0];
  return {add(x, p[0]),     sub(x, p[0]),     mul(x, p[0]),     div(x, p[0]),     pow(x, p[0]),
          maximum(x, p[0]), minimum(x, p[0]), add(p[1], x),     sub(p[1], x),     mul(p[1], x),
          div(p[1], x),     pow(p[1], x),     maximum(p[1], x), minimum(p[1], x)};
}

}  // namespace

TEST_CASE("patch elementwise: log, sqrt, rsqrt, pow_scalar, erf, abs, clamp, to_dtype keep any sharding",
          "[patch]") {
  const Mesh& line = line_mesh();
  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    ShardedCase c = sharded_case("more unary " + e.name, {positive({11, 3}, 20)}, {on_line(S(0))}, {{e.extents}});
    check_patch(line, more_unary, c, {});
  }
  if (has_grid())
    for (const GridCase& g : grid_cases(5, 7)) {
      ShardedCase c = sharded_case("more unary 2x2 " + g.name, {positive({5, 7}, 21)}, {kGridS0S1}, {{g.dx, g.dy}});
        check_patch(grid_mesh(), more_unary, c, {});
    }
}

TEST_CASE("patch elementwise: pow, maximum, minimum of equally sharded operands, no collectives", "[patch]") {
  const Mesh& line = line_mesh();
  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    ShardedCase c = sharded_case("pow/max/min " + e.name, {positive({11, 3}, 22), positive({11, 3}, 23)},
                                 {on_line(S(0)), on_line(S(0))}, {{e.extents}, {e.extents}});
    check_patch(line, more_binary, c, {});
  }
  if (has_grid())
    for (const GridCase& g : grid_cases(5, 7)) {
      ShardedCase c = sharded_case("pow/max/min 2x2 " + g.name, {positive({5, 7}, 24), positive({5, 7}, 25)},
                                   {kGridS0S1, kGridS0S1}, {{g.dx, g.dy}, {g.dx, g.dy}});
      check_patch(grid_mesh(), more_binary, c, {});
    }
}

TEST_CASE("patch elementwise: a plain Tensor on either side of every binary op; its grad reduced once per axis",
          "[patch]") {
  const std::vector<Tensor> params = {positive({7}, 26), positive({1, 7}, 27)};
  const std::vector<std::string> ops = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"};
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c = sharded_case("plain tensors " + e.name, {positive({11, 7}, 28)}, {on_line(S(0))}, {{e.extents}});
    c.params = params;
    std::vector<ExpectedComm> want;  // each op twice: the right-hand parameter, then the left-hand one
    for (const std::string& op : ops)
      want.push_back({op + ".backward", "all_reduce", "domain", 2, 2 * all_reduce_bytes(7, 8, p)});
    check_patch(line, with_plain_tensors, c, want);
  }
  if (has_grid())
    for (const GridCase& g : grid_cases(5, 7)) {
      ShardedCase c =
          sharded_case("plain tensors 2x2 " + g.name, {positive({5, 7}, 29)}, {kGridS0S1}, {{g.dx, g.dy}});
      // Both dims sharded: the parameters broadcast over both (a (7) would need slicing along dy).
      c.params = {positive({1}, 41), positive({1, 1}, 42)};
      std::vector<ExpectedComm> want;
      for (const std::string& op : ops)
        for (const std::string axis : {"dx", "dy"})
          want.push_back({op + ".backward", "all_reduce", axis, 2, 2 * all_reduce_bytes(1, 8, 2)});
      check_patch(grid_mesh(), with_plain_tensors, c, want);
    }
}

TEST_CASE("patch elementwise: comparisons give the local op's u8 on the global tensors, no grad, no collectives",
          "[patch]") {
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    const ShardTensor &a = in[0], &b = in[1];
    // b's copy of a's values where it is odd-indexed: ties, so eq/le/ge differ from lt/gt.
    return std::vector<ShardTensor>{eq(a, b), ne(a, b), lt(a, b), le(a, b), gt(a, b), ge(a, b),
                                    lt(a, p[0]), ge(p[0], a)};
  };
  const Tensor a = with_ties_2d({11, 3}, 30), b = with_ties_2d({11, 3}, 31);
  const Tensor row = with_ties_2d({1, 3}, 32);
  const Mesh& line = line_mesh();
  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    const ShardTensor as = distribute(a, line, on_line(S(0)), AxisExtents{e.extents});
    const ShardTensor bs = distribute(b, line, on_line(S(0)), AxisExtents{e.extents});
    line.flat().ledger().reset();
    const std::vector<ShardTensor> got = fn({as, bs}, {row});
    check_ledger(line, {});
    const std::vector<Tensor> want = {eq(a, b), ne(a, b), lt(a, b), le(a, b), gt(a, b), ge(a, b), lt(a, row), ge(row, a)};
    for (size_t k = 0; k < got.size(); ++k) {
      INFO("comparison " << k << ", " << e.name);
      CHECK(got[k].dtype() == DType::u8);
      CHECK(got[k].placements()[0] == S(0));
      CHECK(got[k].spec().extents(0) == e.extents);
      CHECK(!requires_grad(got[k].local()));
      CHECK_SAME_VALUES(full_tensor(got[k]), want[k]);
    }
  }
  if (has_grid())
    for (const GridCase& g : grid_cases(11, 3)) {
      const ShardTensor as = distribute(a, grid_mesh(), kGridS0S1, AxisExtents{g.dx, g.dy});
      const ShardTensor bs = distribute(b, grid_mesh(), kGridS0S1, AxisExtents{g.dx, g.dy});
      const ShardTensor rs = distribute(row, grid_mesh(), {R, S(1)}, AxisExtents{{}, g.dy});
      grid_mesh().flat().ledger().reset();
      // A plain Tensor must broadcast over both sharded dims: a 0-d one.
      const Tensor zero = full({}, 0.0, {DType::f64});
      const std::vector<ShardTensor> got = {le(as, bs), ne(rs, as), gt(as, zero)};
      check_ledger(grid_mesh(), {});
      const std::vector<Tensor> want = {le(a, b), ne(row, a), gt(a, zero)};
      for (size_t k = 0; k < got.size(); ++k) {
        INFO("comparison " << k << " on the 2x2 mesh, " << g.name);
        CHECK(got[k].placements() == kGridS0S1);
        CHECK_SAME_VALUES(full_tensor(got[k]), want[k]);
      }
    }
}

TEST_CASE("patch elementwise: where routes grads to a and b; replicated ones reduced once per axis", "[patch]") {
  // cond = gt(x, 0) from the sharded x (no grad); a sharded like x, b (1, 3) Replicate; then a and b both
  // replicated against the sharded cond: their grads packed into one all-reduce.
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    const ShardTensor cond = gt(in[0], full({}, 0.1, {DType::f64}));
    return std::vector<ShardTensor>{where(cond, in[1], in[2]), where(cond, p[0], in[2])};
  };
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c = sharded_case("where " + e.name, {rnd({11, 3}, 33), rnd({11, 3}, 34), rnd({1, 3}, 35)},
                                 {on_line(S(0)), on_line(S(0)), on_line(R)}, {{e.extents}, {e.extents}, {}});
    c.input_requires_grad = {false, true, true};
    c.params = {rnd({3}, 36)};
    check_patch(line, fn, c,
                {{"where.backward", "all_reduce", "domain", 2,
                  all_reduce_bytes(3, 8, p) + all_reduce_bytes(3 + 3, 8, p)}});
  }
}

TEST_CASE("patch elementwise: where on the 2x2 mesh, cond sharded on both axes", "[patch]") {
  if (!has_grid()) return;
  // a (5, 7) sharded like cond; b (5, 1) sharded like cond on dx, Replicate on dy: its grad reduced over dy only.
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{where(gt(in[0], full({}, 0.0, {DType::f64})), in[1], in[2])};
  };
  const Mesh& grid = grid_mesh();
  for (const GridCase& g : grid_cases(5, 7)) {
    ShardedCase c = sharded_case("where 2x2 " + g.name, {rnd({5, 7}, 37), rnd({5, 7}, 38), rnd({5, 1}, 39)},
                                 {kGridS0S1, kGridS0S1, {S(0), R}}, {{g.dx, g.dy}, {g.dx, g.dy}, {g.dx, {}}});
    c.input_requires_grad = {false, true, true};
    const int64_t my_dx = g.dx[grid.coord("dx")];
    check_patch(grid, fn, c, {{"where.backward", "all_reduce", "dy", 1, all_reduce_bytes(my_dx, 8, 2)}});
  }
}

TEST_CASE("patch elementwise: the new ops refuse Partial and unaligned operands with MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor full_x = rnd({11, 3}, 40);
  const ShardTensor a = distribute(full_x, line, on_line(S(0)));
  const ShardTensor whole = distribute(full_x, line, on_line(R));
  const ShardTensor by_col = distribute(full_x, line, on_line(S(1)));
  const ShardTensor partial = sum(a, {0});
  const ShardTensor cond = gt(a, full({}, 0.0, {DType::f64}));
  check_rejected({
      rejects<MissingShardPatch>("log of a pending sum", "log: no patch for placements (P)",
                                 [=] { (void)log(partial); }),
      rejects<MissingShardPatch>("pow of pending sums", "pow: no patch", [=] { (void)pow(partial, partial); }),
      // A plain Tensor on the left with the whole extent of the sharded dim would need slicing.
      rejects<MissingShardPatch>("plain tensor left of a shard", "sub: no patch for placements (R) global [11, 3] and (S(0))",
                                 [=] { (void)sub(full_x, a); }),
      rejects<MissingShardPatch>("maximum of shards of different dims", "maximum: no patch",
                                 [=] { (void)maximum(a, by_col); }),
      rejects<MissingShardPatch>("eq against a whole replicated operand", "eq: no patch",
                                 [=] { (void)eq(a, whole); }),
      rejects<MissingShardPatch>("where with a whole replicated operand", "where: no patch",
                                 [=] { (void)where(cond, whole, a); }),
      rejects<MissingShardPatch>("where with operands sharded on different dims", "where: no patch",
                                 [=] { (void)where(cond, a, by_col); }),
      rejects<MissingShardPatch>("clamp of a pending sum", "clamp: no patch", [=] { (void)clamp(partial, 0, 1); }),
      // Global shapes that do not broadcast: a ShapeError, whatever the placements.
      rejects<ShapeError>("where of shapes that do not broadcast", "where: shapes [11, 3] and [4] do not broadcast",
                          [=] { (void)where(cond, a, rnd({4}, 43)); }),
  });
}
