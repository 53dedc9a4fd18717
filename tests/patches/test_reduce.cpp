// Reduction patches against the serial fp64 oracle: sum/mean over sharded dims leave a pending sum (Partial) with
// no collective, exact for uneven and zero-size shards; amax over sharded dims all-reduces the max and routes the
// grad to the first maximum in global order (ties included); bad arguments are the local op's error, named after
// the op called, on every rank.
#include <algorithm>
#include <cmath>

#include "tests/patches/bad_input_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

std::vector<ShardTensor> sums_and_means(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  const ShardTensor& x = in[0];
  return {sum(x, {1}),  sum(x, {0, 2}), sum(x, {}),  sum(x, {1}, true),
          mean(x, {1}), mean(x, {-1}),  mean(x, {}), mean(x, {0, 1}, true)};
}

// Integer values in [-3, 3]: every row holds its maximum several times, on several ranks.
Tensor with_ties(const Shape& shape, uint64_t seed) {
  Tensor x = rnd(shape, seed);
  std::vector<double> v = x.to_vector();
  for (double& e : v) e = std::max(-3.0, std::min(3.0, std::round(1.5 * e)));
  return from_vector(v, shape, {DType::f64});
}

using ReduceFn = ShardTensor (*)(const ShardTensor&, const std::vector<int>&, bool);
using LocalReduceFn = Tensor (*)(const Tensor&, const std::vector<int>&, bool);

// Bad arguments of sum, mean and amax for x sharded as xs (xi: an i64 x in the same layout); each refused by the
// local op as well, with the same message for the global tensor.
std::vector<BadInput> reduce_bad_inputs(const Tensor& x, const ShardTensor& xs, const Tensor& xi_full,
                                        const ShardTensor& xi) {
  struct Op {
    std::string name;
    ReduceFn sharded;
    LocalReduceFn local;
  };
  const std::vector<Op> ops = {{"sum", &shardrt::sum, &shardrt::sum},
                               {"mean", &shardrt::mean, &shardrt::mean},
                               {"amax", &shardrt::amax, &shardrt::amax}};
  const std::string xi_str = xi_full.str();
  std::vector<BadInput> rows;
  for (const Op& op : ops) {
    auto row = [&](std::string name, std::string says, const ShardTensor& s, const Tensor& l, std::vector<int> dims) {
      return rejects<ShapeError>(op.name + " " + name, op.name + ": " + says, [=] { (void)op.sharded(s, dims, false); },
                                 [=] { (void)op.local(l, dims, false); });
    };
    rows.push_back(rejects<DTypeError>(op.name + " i64 input", op.name + ": input must be f32 or f64, got " + xi_str,
                                       [=] { (void)op.sharded(xi, {1}, false); },
                                       [=] { (void)op.local(xi_full, {1}, false); }));
    rows.push_back(row("dim 3", "dim 3 is out of range", xs, x, {3}));
    rows.push_back(row("dim -4", "dim -4 is out of range", xs, x, {-4}));
    rows.push_back(row("dim 1 twice", "dim -2 given twice", xs, x, {1, -2}));
  }
  return rows;
}

}  // namespace

TEST_CASE("patch sum/mean/amax: bad arguments are the local op's error, named after the op, on every rank",
          "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor x = rnd({2, 11, 3}, 59), xi = iota({2, 11, 3}, DType::i64);
  auto amax_fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{amax(in[0], {1}), amax(in[0], {0})};
  };
  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    INFO("1-D mesh, " << e.name << " extents");
    const ShardTensor xs = distribute(x, line, on_line(S(1)), AxisExtents{e.extents});
    check_rejected(reduce_bad_inputs(x, xs, xi, distribute(xi, line, on_line(S(1)), AxisExtents{e.extents})));
    // The job goes on: amax over the sharded dim all-reduces its (2, 3) output on every rank, forward (max) and
    // backward (min of the winners' indices); amax over dim 0 is local.
    const int64_t b = all_reduce_bytes(2 * 3, 8, line.size());
    check_patch(line, amax_fn, sharded_case("amax after the bad inputs", {x}, {on_line(S(1))}, {{e.extents}}),
                {{"amax.forward", "all_reduce", "domain", 1, b}, {"amax.backward", "all_reduce", "domain", 1, b}});
  }
  // A max over no element: the local op refuses it, so every rank does (rather than all-reduce an empty -inf).
  const Tensor empty = zeros({2, 0, 3}, {DType::f64});
  const ShardTensor es = distribute(empty, line, on_line(S(1)));
  check_rejected({rejects<ShapeError>("amax over an empty sharded dim",
                                      "amax: cannot reduce over an empty dimension of f64[2, 0, 3]",
                                      [=] { (void)amax(es, {1}); }, [=] { (void)amax(empty, {1}); })});
  CHECK(sum(es, {1}).global_shape() == Shape{2, 3});  // a sum over nothing is 0: accepted, as the local op does
  if (!has_grid()) return;
  const Tensor x2 = rnd({5, 7, 3}, 60), xi2 = iota({5, 7, 3}, DType::i64);
  for (const AxisExtents& ext : grid_extents(5, 7)) {
    const ShardTensor xs = distribute(x2, grid_mesh(), kGridS0S1, ext);
    check_rejected(reduce_bad_inputs(x2, xs, xi2, distribute(xi2, grid_mesh(), kGridS0S1, ext)));
    // amax over dim 1 (over dy) all-reduces this rank's (dx extent, 3) output over dy; amax over dim 0 (over dx)
    // its (dy extent, 3) output over dx; each forward and backward.
    const int64_t by = all_reduce_bytes(ext[0][grid_mesh().coord("dx")] * 3, 8, 2);
    const int64_t bx = all_reduce_bytes(ext[1][grid_mesh().coord("dy")] * 3, 8, 2);
    check_patch(grid_mesh(), amax_fn, sharded_case("amax 2x2 after the bad inputs", {x2}, {kGridS0S1}, {ext}),
                {{"amax.forward", "all_reduce", "dx", 1, bx},
                 {"amax.forward", "all_reduce", "dy", 1, by},
                 {"amax.backward", "all_reduce", "dx", 1, bx},
                 {"amax.backward", "all_reduce", "dy", 1, by}});
  }
}

TEST_CASE("patch sum/mean: sharded dims give Partial, renumbered Shard otherwise, no collectives", "[patch]") {
  const Mesh& line = line_mesh();
  const ShardTensor x = distribute(rnd({2, 11, 3}, 50), line, on_line(Placement::Shard(1)));
  CHECK(sum(x, {1}).placements()[0].is_partial());
  CHECK(sum(x, {1}).global_shape() == Shape{2, 3});
  CHECK(mean(x, {}).placements()[0].is_partial());
  CHECK(sum(x, {0}).placements()[0] == Placement::Shard(0));
  CHECK(sum(x, {0}).spec().extents(0) == x.spec().extents(0));
  CHECK(mean(x, {0}, true).placements()[0] == Placement::Shard(1));
  CHECK(amax(x, {1}).placements()[0].is_replicate());
  CHECK(amax(x, {0, 2}).placements()[0] == Placement::Shard(0));

  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    ShardedCase c =
        sharded_case("sum/mean " + e.name, {rnd({2, 11, 3}, 51)}, {on_line(Placement::Shard(1))}, {{e.extents}});
    check_patch(line, sums_and_means, c, {});
  }
  if (has_grid())
    for (const auto& ext : grid_extents(5, 7)) {
      ShardedCase c = sharded_case("sum/mean 2x2", {rnd({5, 7, 3}, 52)}, {kGridS0S1}, {ext});
      check_patch(grid_mesh(), sums_and_means, c, {});
    }
}

TEST_CASE("patch amax: all-reduce max forward, first global maximum gets the grad (ties too)", "[patch]") {
  // Per call with a sharded reduced dim: one all_reduce (max) forward and one (min, f64 indices) backward of the
  // local output. Outputs: (2, 3), (1, 1, 3), scalar; amax over dim 2 is local.
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const ShardTensor& x = in[0];
    return std::vector<ShardTensor>{amax(x, {1}), amax(x, {0, 1}, true), amax(x, {}), amax(x, {2})};
  };
  const Mesh& line = line_mesh();
  const int p = line.size();
  const int64_t b = all_reduce_bytes(6 + 3 + 1, 8, p);
  for (const ExtentsCase& e : extents_cases(11, p)) {
    const std::vector<std::pair<std::string, Tensor>> data = {{"distinct", rnd({2, 11, 3}, 53)},
                                                              {"ties", with_ties({2, 11, 3}, 54)}};
    for (const auto& [name, values] : data) {
      ShardedCase c =
          sharded_case("amax " + name + " " + e.name, {values}, {on_line(Placement::Shard(1))}, {{e.extents}});
      check_patch(line, fn, c,
                  {{"amax.forward", "all_reduce", "domain", 3, b}, {"amax.backward", "all_reduce", "domain", 3, b}});
    }
  }
  if (has_grid()) {
    // Over both sharded dims: (1, 1, 3) reduced over dx and dy; over dim 1 only: this rank's (dx extent, 3) over dy.
    auto fn2 = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      return std::vector<ShardTensor>{amax(in[0], {0, 1}, true), amax(in[0], {1})};
    };
    const Mesh& grid = grid_mesh();
    for (const auto& ext : grid_extents(5, 7)) {
      const int64_t my_dx = ext[0][grid.coord("dx")];
      const int64_t bx = all_reduce_bytes(3, 8, 2), by = all_reduce_bytes(3 + my_dx * 3, 8, 2);
      ShardedCase c = sharded_case("amax 2x2 ties", {with_ties({5, 7, 3}, 55)}, {kGridS0S1}, {ext});
      check_patch(grid, fn2, c,
                  {{"amax.forward", "all_reduce", "dx", 1, bx},
                   {"amax.forward", "all_reduce", "dy", 2, by},
                   {"amax.backward", "all_reduce", "dx", 1, bx},
                   {"amax.backward", "all_reduce", "dy", 2, by}});
    }
  }
}

TEST_CASE("patch reductions: a Partial input is MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const ShardTensor x = distribute(rnd({2, 11, 3}, 58), line, on_line(Placement::Shard(1)));
  const ShardTensor partial = sum(x, {1});
  CHECK_THROWS_AS(amax(partial, {0}), MissingShardPatch);
  CHECK_THROWS_AS(sum(partial, {0}), MissingShardPatch);
  CHECK_THROWS_AS(mean(partial, {}), MissingShardPatch);
}

TEST_CASE("patch amin: all-reduce min forward, first global minimum gets the grad (ties too)", "[patch]") {
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const ShardTensor& x = in[0];
    return std::vector<ShardTensor>{amin(x, {1}), amin(x, {0, 1}, true), amin(x, {}), amin(x, {2})};
  };
  const Mesh& line = line_mesh();
  const int p = line.size();
  const int64_t b = all_reduce_bytes(6 + 3 + 1, 8, p);
  for (const ExtentsCase& e : extents_cases(11, p)) {
    const std::vector<std::pair<std::string, Tensor>> data = {{"distinct", rnd({2, 11, 3}, 73)},
                                                              {"ties", with_ties({2, 11, 3}, 74)}};
    for (const auto& [name, values] : data) {
      ShardedCase c = sharded_case("amin " + name + " " + e.name, {values}, {on_line(S(1))}, {{e.extents}});
      check_patch(line, fn, c,
                  {{"amin.forward", "all_reduce", "domain", 3, b}, {"amin.backward", "all_reduce", "domain", 3, b}});
    }
  }
  if (has_grid()) {
    auto fn2 = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      return std::vector<ShardTensor>{amin(in[0], {0, 1}, true), amin(in[0], {1})};
    };
    const Mesh& grid = grid_mesh();
    for (const auto& ext : grid_extents(5, 7)) {
      const int64_t my_dx = ext[0][grid.coord("dx")];
      const int64_t bx = all_reduce_bytes(3, 8, 2), by = all_reduce_bytes(3 + my_dx * 3, 8, 2);
      ShardedCase c = sharded_case("amin 2x2 ties", {with_ties({5, 7, 3}, 75)}, {kGridS0S1}, {ext});
      check_patch(grid, fn2, c,
                  {{"amin.forward", "all_reduce", "dx", 1, bx},
                   {"amin.forward", "all_reduce", "dy", 2, by},
                   {"amin.backward", "all_reduce", "dx", 1, bx},
                   {"amin.backward", "all_reduce", "dy", 2, by}});
    }
  }
}

TEST_CASE("patch logsumexp: distributed max then sum forward, local backward", "[patch]") {
  // Per call with a sharded reduced dim: two all_reduces (max, then sum) of the local output, none backward.
  // Outputs: (2, 3), (1, 1, 3), scalar; logsumexp over dim 2 is local.
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const ShardTensor& x = in[0];
    return std::vector<ShardTensor>{logsumexp(x, {1}), logsumexp(x, {0, 1}, true), logsumexp(x, {}),
                                    logsumexp(x, {2})};
  };
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (const ExtentsCase& e : extents_cases(11, p)) {
    // Scaled up so that exp(x) alone would overflow: the shift by the GLOBAL max must be there.
    ShardedCase c = sharded_case("logsumexp " + e.name, {mul_scalar(rnd({2, 11, 3}, 76), 400.0)}, {on_line(S(1))},
                                 {{e.extents}});
    check_patch(line, fn, c, {{"logsumexp.forward", "all_reduce", "domain", 6, 2 * all_reduce_bytes(6 + 3 + 1, 8, p)}});
  }
  if (has_grid()) {
    auto fn2 = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      return std::vector<ShardTensor>{logsumexp(in[0], {0, 1}, true), logsumexp(in[0], {1})};
    };
    const Mesh& grid = grid_mesh();
    for (const auto& ext : grid_extents(5, 7)) {
      const int64_t my_dx = ext[0][grid.coord("dx")];
      ShardedCase c = sharded_case("logsumexp 2x2", {rnd({5, 7, 3}, 77)}, {kGridS0S1}, {ext});
      check_patch(grid, fn2, c,
                  {{"logsumexp.forward", "all_reduce", "dx", 2, 2 * all_reduce_bytes(3, 8, 2)},
                   {"logsumexp.forward", "all_reduce", "dy", 4, 2 * all_reduce_bytes(3 + my_dx * 3, 8, 2)}});
    }
  }
}

TEST_CASE("patch amin/logsumexp: bad arguments are the local op's error; a Partial input MissingShardPatch",
          "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor x = rnd({2, 11, 3}, 78), empty = zeros({2, 0, 3}, {DType::f64});
  const ShardTensor xs = distribute(x, line, on_line(S(1)));
  const ShardTensor es = distribute(empty, line, on_line(S(1)));
  const ShardTensor partial = sum(xs, {1});
  check_rejected({
      rejects<ShapeError>("amin dim 3", "amin: dim 3 is out of range", [=] { (void)amin(xs, {3}); },
                          [=] { (void)amin(x, {3}); }),
      rejects<ShapeError>("logsumexp dim -4", "logsumexp: dim -4 is out of range", [=] { (void)logsumexp(xs, {-4}); },
                          [=] { (void)logsumexp(x, {-4}); }),
      rejects<ShapeError>("amin over an empty sharded dim", "amin: cannot reduce over an empty dimension",
                          [=] { (void)amin(es, {1}); }, [=] { (void)amin(empty, {1}); }),
      rejects<MissingShardPatch>("amin of a pending sum", "amin: no patch for placements (P)",
                                 [=] { (void)amin(partial, {0}); }),
      rejects<MissingShardPatch>("logsumexp of a pending sum", "logsumexp: no patch for placements (P)",
                                 [=] { (void)logsumexp(partial, {0}); }),
  });
}
