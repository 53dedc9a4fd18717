// redistribute: every transition on 1-D meshes and on the ddp x domain grids of this world size, with even,
// uneven and zero-size shards. Forward values are compared exactly with the original tensor; backward seeds a
// fixed random global grad on the result and checks that exactly this rank's window of it comes back (the
// serial result: redistribute is the identity on the global tensor). Ledger cases pin the collectives of
// representative hops, forward and backward; bad targets raise typed errors on every rank.
#include <catch2/catch.hpp>

#include <algorithm>

#include "autograd/ops.h"
#include "tests/patches/patch_testing.h"
#include "patches/errors.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// Extents of one sharded dim over n ranks: even, uneven, fewer elements than ranks, explicit zero-size shards.
std::vector<std::pair<std::string, std::vector<int64_t>>> layouts(int n) {
  return {{"even", split_extents(2 * n, n)},
          {"uneven", split_extents(2 * n + 1 + (n > 2 ? 1 : 0), n)},
          {"fewer elements than ranks", split_extents(std::max(n - 1, 1), n)},
          {"explicit zero-size shards", zero_extents(n)}};
}

// x (this rank's window of iota, a leaf) redistributed to `to`: the values are the original ones under the new
// layout, axes that keep their placement keep their extents, new shards follow split_extents; a random global
// grad seeded on the result reaches x as this rank's window of it.
void check_transition(const Mesh& mesh, const Shape& shape, const Placements& from,
                      const AxisExtents& extents, const Placements& to) {
  INFO(mesh.str() << " " << placements_str(from) << " -> " << placements_str(to) << " global " << shape_str(shape));
  const Tensor full = iota(shape);
  const ShardSpec spec(mesh, from, shape, extents);
  INFO("source " << spec.str());
  ShardTensor x = leaf_shard(full, spec);
  ShardTensor y = redistribute(x, to);
  INFO("result " << y.spec().str());
  REQUIRE(y.placements() == to);
  CHECK(y.global_shape() == shape);
  for (int m = 0; m < mesh.ndim(); ++m) {
    if (!to[m].is_shard()) continue;
    CHECK(y.spec().extents(m) == (from[m] == to[m] ? extents[m] : split_extents(shape[to[m].dim], mesh.shape()[m])));
  }
  CHECK_SAME_VALUES(y.local(), window(full, y.spec()));
  if (from == to) CHECK(y.local().is_same(x.local()));
  {
    NoGradGuard no_grad;
    CHECK_SAME_VALUES(full_tensor(y), full);
  }
  const Tensor g = rnd(shape, 7);
  backward_global(y, g);
  REQUIRE(grad_of(x.local()).defined());
  CHECK_SAME_VALUES(grad_of(x.local()), window(g, spec));
}

// The part held at coordinate j of a Partial axis: (j + 1) * iota + j, so the parts differ by rank and the sum
// stays an exact integer.
Tensor part(const Shape& shape, int j) { return add_scalar(mul_scalar(iota(shape), j + 1), j); }

// x holds this rank's window of its part along Partial axis `pm`; the result must be the window of the sum of
// the parts, and every part's grad is the window of the global grad (d sum / d part = 1).
void check_partial(const Mesh& mesh, const Shape& shape, const Placements& from,
                   const AxisExtents& extents, const Placements& to, int pm) {
  INFO(mesh.str() << " " << placements_str(from) << " -> " << placements_str(to) << " global " << shape_str(shape));
  Tensor sum = zeros(shape, {DType::f64});
  for (int j = 0; j < mesh.shape()[pm]; ++j) sum = add(sum, part(shape, j));
  const ShardSpec spec(mesh, from, shape, extents);
  Tensor local = window(part(shape, mesh.coords()[pm]), spec).clone();
  set_requires_grad(local);
  ShardTensor x = from_local(local, mesh, from, extents, {.allow_partial = true});
  ShardTensor y = redistribute(x, to);
  INFO("result " << y.spec().str());
  REQUIRE(y.placements() == to);
  CHECK_SAME_VALUES(y.local(), window(sum, y.spec()));
  {
    NoGradGuard no_grad;
    CHECK_SAME_VALUES(full_tensor(y), sum);
  }
  const Tensor g = rnd(shape, 11);
  backward_global(y, g);
  REQUIRE(grad_of(local).defined());
  CHECK_SAME_VALUES(grad_of(local), window(g, spec));
}

// A caller decomposition of `len` over n ranks: zero-size shards at even coordinates, the split rule over the odd
// ones (one rank: all of it).
Extents caller(int64_t len, int n) {
  if (n == 1) return {len};
  const Extents odd = split_extents(len, n / 2);
  Extents e(n, 0);
  for (int j = 1; j < n; j += 2) e[j] = odd[j / 2];
  return e;
}

// The split rule reversed: the last ranks hold the extra elements.
Extents reversed_split(int64_t len, int n) {
  Extents e = split_extents(len, n);
  std::reverse(e.begin(), e.end());
  return e;
}

// Elements of dim d in this rank's window under `from` that other ranks own under `to`.
int64_t leaving(const Extents& from, const Extents& to, int me) {
  int64_t f0 = 0, t0 = 0;
  for (int j = 0; j < me; ++j) f0 += from[j], t0 += to[j];
  return from[me] - std::max<int64_t>(0, std::min(f0 + from[me], t0 + to[me]) - std::max(f0, t0));
}

// x (this rank's window of iota under `from`/`from_ext`, a leaf) redistributed to `to` with the caller's
// `to_ext`: the result has exactly those extents and the original values, and a random global grad comes back
// as this rank's window of it under the source layout.
ShardTensor check_to_extents(const Mesh& mesh, const Shape& shape, const Placements& from, const AxisExtents& from_ext,
                             const Placements& to, const AxisExtents& to_ext) {
  const Tensor full = iota(shape);
  const ShardSpec spec(mesh, from, shape, from_ext);
  INFO(mesh.str() << " " << spec.str() << " -> " << placements_str(to));
  ShardTensor x = leaf_shard(full, spec);
  ShardTensor y = redistribute(x, to, to_ext);
  INFO("result " << y.spec().str());
  CHECK(y.spec() == ShardSpec(mesh, to, shape, to_ext));
  CHECK_SAME_VALUES(y.local(), window(full, y.spec()));
  const Tensor g = rnd(shape, 13);
  backward_global(y, g);
  REQUIRE(grad_of(x.local()).defined());
  CHECK_SAME_VALUES(grad_of(x.local()), window(g, spec));
  return y;
}

}  // namespace

TEST_CASE("redistribute to caller extents: S(d) -> S(d) is one all_to_all_v each way, exact bytes",
          "[core][redistribute][ledger]") {
  auto ledger = std::make_shared<CommLedger>();
  const Mesh mesh = world_1d(ledger);
  const int n = mesh.size(), me = mesh.rank();
  const int64_t len = 2 * n + 1;
  const std::vector<std::pair<Extents, Extents>> moves = {{split_extents(len, n), caller(len, n)},
                                                          {caller(len, n), reversed_split(len, n)},
                                                          {reversed_split(len, n), split_extents(len, n)}};
  for (int d : {0, 1})
    for (const auto& [from, to] : moves) {
      if (from == to) continue;  // one rank: a single decomposition
      Shape shape{3, 3};
      shape[d] = len;
      ledger->reset();
      const Tensor full = iota(shape);
      const ShardSpec spec(mesh, {S(d)}, shape, {from});
      ShardTensor x = leaf_shard(full, spec);
      ledger->reset();
      ShardTensor y = redistribute(x, {S(d)}, {to});
      CHECK(y.spec().extents(0) == to);
      CHECK_SAME_VALUES(y.local(), window(full, y.spec()));
      CHECK(ledger->calls("redistribute", "all_to_all_v", "domain") == 1);
      CHECK(ledger->bytes("redistribute", "all_to_all_v", "domain") == leaving(from, to, me) * 3 * 8);
      CHECK(ledger->total_calls() == 1);
      ledger->reset();
      const Tensor g = rnd(shape, 17);
      backward_global(y, g);
      CHECK(ledger->calls("redistribute.backward", "all_to_all_v", "domain") == 1);
      CHECK(ledger->bytes("redistribute.backward", "all_to_all_v", "domain") == leaving(to, from, me) * 3 * 8);
      CHECK(ledger->total_calls() == 1);
      CHECK_SAME_VALUES(grad_of(x.local()), window(g, spec));
    }
}

TEST_CASE("redistribute to caller extents: new placements, both grid axes, a spec as target", "[core][redistribute]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size();
  const int64_t len = 2 * n + 1;
  // Another dim, and a slice of a replicated tensor, straight to the caller's extents.
  check_to_extents(mesh, {len, len}, {S(0)}, {split_extents(len, n)}, {S(1)}, {caller(len, n)});
  check_to_extents(mesh, {len, 3}, {R}, {}, {S(0)}, {caller(len, n)});
  check_to_extents(mesh, {len, 3}, {S(0)}, {caller(len, n)}, {R}, {});
  for (auto g : grids()) {
    const Mesh m2 = grid(g);
    const Shape shape{2, 2 * g.first + 1, 2 * g.second + 1};
    const AxisExtents from{split_extents(shape[1], g.first), split_extents(shape[2], g.second)};
    const AxisExtents to{caller(shape[1], g.first), reversed_split(shape[2], g.second)};
    check_to_extents(m2, shape, {S(1), S(2)}, from, {S(1), S(2)}, to);
    check_to_extents(m2, shape, {S(1), S(2)}, from, {S(2), S(1)},
                     {caller(shape[2], g.first), caller(shape[1], g.second)});
  }
  // redistribute(t, spec): the target spec's placements and extents; identical spec: t itself.
  const ShardSpec a(mesh, {S(0)}, {len, 3}, {split_extents(len, n)}), b(mesh, {S(0)}, {len, 3}, {caller(len, n)});
  const ShardTensor x = leaf_shard(iota({len, 3}), a);
  CHECK(redistribute(x, b).spec() == b);
  CHECK(redistribute(x, a).local().is_same(x.local()));
  CHECK(redistribute(x, {S(0)}, {split_extents(len, n)}).local().is_same(x.local()));
}

TEST_CASE("redistribute to caller extents: bad targets are typed errors naming both layouts",
          "[core][redistribute][errors]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size();
  const ShardTensor x = distribute(iota({4, 3}), mesh, {S(0)});
  CHECK_THROWS_AS(redistribute(x, {S(0)}, {Extents(n, 5)}), ShapeError);
  CHECK_THROWS_WITH(redistribute(x, {S(0)}, {Extents(n, 5)}),
                    Catch::Contains("redistribute") && Catch::Contains("dim 0 has global extent 4"));
  CHECK_THROWS_AS(redistribute(x, {S(0)}, {Extents(n + 1, 0)}), ShapeError);
  CHECK_THROWS_AS(redistribute(x, {P}, {{}}), MissingShardPatch);
  const ShardSpec other = ShardSpec::split_evenly(mesh, {S(0)}, {5, 3});
  CHECK_THROWS_AS(redistribute(x, other), ShapeError);
  CHECK_THROWS_WITH(redistribute(x, other), Catch::Contains("global [4, 3]") && Catch::Contains("global [5, 3]"));
}

TEST_CASE("redistribute 1-D: S(d) -> S(d), R, S(d') on even, uneven and zero-size shards", "[core][redistribute]") {
  const Mesh mesh = world_1d();
  for (const auto& [name, ext] : layouts(mesh.size()))
    for (int d : {0, 1})
      for (const Placement& to : {S(d), R, S(1 - d)}) {
        INFO(name);
        Shape shape{3, 3};
        shape[d] = total(ext);
        check_transition(mesh, shape, {S(d)}, {ext}, {to});
      }
}

TEST_CASE("redistribute 2-D: (S(1), S(2)) -> every layout on each ddp x domain grid", "[core][redistribute]") {
  const std::vector<Placements> targets = {{S(1), S(2)}, {R, S(2)},    {S(1), R}, {R, R},      {R, S(1)},
                                           {S(2), R},    {S(2), S(1)}, {S(0), R}, {S(0), S(1)}};
  for (auto g : grids()) {
    const Mesh mesh = grid(g);
    const auto l0 = layouts(g.first), l1 = layouts(g.second);
    for (std::size_t k = 0; k < l0.size(); ++k) {
      INFO(l0[k].first << " on ddp, " << l1[k].first << " on domain");
      const Shape shape{2, total(l0[k].second), total(l1[k].second)};
      for (const Placements& to : targets)
        check_transition(mesh, shape, {S(1), S(2)}, {l0[k].second, l1[k].second}, to);
    }
  }
}

TEST_CASE("redistribute: Shard -> Shard and back restores the source extents through backward",
          "[core][redistribute]") {
  // Uneven source extents that split_extents would not produce: the backward of S(0) -> S(1) -> S(0) still
  // lands on exactly those windows.
  const Mesh mesh = world_1d();
  const auto ext = zero_extents(mesh.size());
  const Shape shape{total(ext), 5};
  const Tensor full = iota(shape);
  const ShardSpec spec(mesh, {S(0)}, shape, {ext});
  ShardTensor x = leaf_shard(full, spec);
  ShardTensor z = redistribute(redistribute(x, {S(1)}), {S(0)});
  CHECK(z.spec().extents(0) == split_extents(shape[0], mesh.size()));
  CHECK_SAME_VALUES(z.local(), window(full, z.spec()));
  const Tensor g = rnd(shape, 3);
  backward_global(z, g);
  CHECK_SAME_VALUES(grad_of(x.local()), window(g, spec));
}

TEST_CASE("redistribute: Partial -> Replicate and Partial -> Shard with rank-distinct parts", "[core][redistribute]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size();
  for (int64_t rows : {int64_t{2} * n, int64_t{2} * n + 1, int64_t{std::max(n - 1, 1)}})
    for (const Placement& to : {R, S(0), S(1)}) check_partial(mesh, {rows, 3}, {P}, {}, {to}, 0);

  for (auto g : grids()) {
    const Mesh m2 = grid(g);
    const auto e0 = split_extents(2 * g.first + 1, g.first), e1 = zero_extents(g.second);
    const Shape shape{total(e0), total(e1) + 1};
    // Partial on ddp next to a Shard on domain; (P, S(0)) -> (S(0), R) must gather domain before it can
    // reduce-scatter dim 0 over ddp.
    check_partial(m2, {total(e1), 3}, {P, S(0)}, {{}, e1}, {S(0), R}, 0);
    check_partial(m2, {total(e1), 3}, {P, S(0)}, {{}, e1}, {R, S(0)}, 0);
    check_partial(m2, {total(e1), 3}, {P, S(0)}, {{}, e1}, {S(1), S(0)}, 0);
    check_partial(m2, shape, {S(0), P}, {e0, {}}, {S(0), S(1)}, 1);
    check_partial(m2, shape, {S(0), P}, {e0, {}}, {R, R}, 1);
  }
}

TEST_CASE("redistribute ledger: exact collectives of each hop, forward and backward", "[core][redistribute][ledger]") {
  auto ledger = std::make_shared<CommLedger>();
  const Mesh mesh = world_1d(ledger);
  const int n = mesh.size(), me = mesh.rank();
  const int64_t f64 = 8;
  const auto ext = split_extents(2 * n + 1, n);  // uneven
  const Shape shape{total(ext), 3};
  const Tensor full = iota(shape);
  const ShardSpec s0(mesh, {S(0)}, shape, {ext});
  const Tensor g = rnd(shape, 5);

  SECTION("S(0) -> R: one all_gather_v forward, nothing backward") {
    ShardTensor x = leaf_shard(full, s0);
    ledger->reset();
    ShardTensor y = redistribute(x, {R});
    CHECK(ledger->calls("redistribute", "all_gather_v", "domain") == 1);
    CHECK(ledger->bytes("redistribute", "all_gather_v", "domain") == ext[me] * 3 * f64 * (n - 1));
    CHECK(ledger->total_calls() == 1);
    ledger->reset();
    backward_global(y, g);
    CHECK(ledger->total_calls() == 0);
  }
  SECTION("R -> S(0): a local slice forward, one all_gather_v backward") {
    Tensor leaf = full.clone();
    set_requires_grad(leaf);
    ShardTensor x = from_local(leaf, mesh, {R});
    ledger->reset();
    ShardTensor y = redistribute(x, {S(0)});
    CHECK(ledger->total_calls() == 0);
    backward_global(y, g);
    CHECK(ledger->calls("redistribute.backward", "all_gather_v", "domain") == 1);
    CHECK(ledger->bytes("redistribute.backward", "all_gather_v", "domain") == y.local().numel() * f64 * (n - 1));
    CHECK(ledger->total_calls() == 1);
    CHECK_SAME_VALUES(grad_of(leaf), g);  // complete on every rank
  }
  SECTION("S(0) -> S(1): one all_to_all_v each way") {
    ShardTensor x = leaf_shard(full, s0);
    ledger->reset();
    ShardTensor y = redistribute(x, {S(1)});
    const auto e1 = split_extents(3, n);
    CHECK(ledger->calls("redistribute", "all_to_all_v", "domain") == 1);
    CHECK(ledger->bytes("redistribute", "all_to_all_v", "domain") == ext[me] * (3 - e1[me]) * f64);
    CHECK(ledger->total_calls() == 1);
    ledger->reset();
    backward_global(y, g);
    CHECK(ledger->calls("redistribute.backward", "all_to_all_v", "domain") == 1);
    CHECK(ledger->bytes("redistribute.backward", "all_to_all_v", "domain") == (total(ext) - ext[me]) * e1[me] * f64);
    CHECK(ledger->total_calls() == 1);
  }
  SECTION("P -> R: one all_reduce forward, identity backward") {
    Tensor leaf = full.clone();
    set_requires_grad(leaf);
    ShardTensor y = redistribute(from_local(leaf, mesh, {P}, std::nullopt, {.allow_partial = true}), {R});
    CHECK(ledger->calls("redistribute", "all_reduce", "domain") == 1);
    CHECK(ledger->bytes("redistribute", "all_reduce", "domain") == full.numel() * f64 * (n - 1));
    CHECK(ledger->total_calls() == 1);
    ledger->reset();
    backward_global(y, g);
    CHECK(ledger->total_calls() == 0);
  }
  SECTION("P -> S(0): one reduce_scatter_v forward, one all_gather_v backward") {
    Tensor leaf = full.clone();
    set_requires_grad(leaf);
    ShardTensor y = redistribute(from_local(leaf, mesh, {P}, std::nullopt, {.allow_partial = true}), {S(0)});
    const auto e = split_extents(shape[0], n);
    CHECK(ledger->calls("redistribute", "reduce_scatter_v", "domain") == 1);
    CHECK(ledger->bytes("redistribute", "reduce_scatter_v", "domain") == (total(e) - e[me]) * 3 * f64);
    CHECK(ledger->total_calls() == 1);
    ledger->reset();
    backward_global(y, g);
    CHECK(ledger->calls("redistribute.backward", "all_gather_v", "domain") == 1);
    CHECK(ledger->total_calls() == 1);
  }
  SECTION("unchanged placements: t itself, no collective") {
    ShardTensor x = leaf_shard(full, s0);
    ledger->reset();
    ShardTensor y = redistribute(x, {S(-2)});  // the same dim, spelled negatively
    CHECK(y.local().is_same(x.local()));
    CHECK(ledger->total_calls() == 0);
  }
  SECTION("an enclosing scope prefixes the label") {
    ShardTensor x = leaf_shard(full, s0);
    ledger->reset();
    {
      auto outer = ledger->scope("linear");
      redistribute(x, {R});
    }
    CHECK(ledger->calls("linear.redistribute", "all_gather_v", "domain") == 1);
    CHECK(ledger->total_calls() == 1);
  }
}

TEST_CASE("redistribute ledger 2-D: one hop per axis, on that axis only", "[core][redistribute][ledger]") {
  for (auto gshape : grids()) {
    auto ledger = std::make_shared<CommLedger>();
    const Mesh mesh = grid(gshape, ledger);
    INFO(mesh.str());
    const auto e1 = split_extents(2 * gshape.first + 1, gshape.first), e2 = zero_extents(gshape.second);
    const Shape shape{2, total(e1), total(e2)};
    const ShardSpec spec(mesh, {S(1), S(2)}, shape, {e1, e2});
    const Tensor full = iota(shape);
    const int64_t local_bytes = window(full, spec).numel() * 8;

    ShardTensor x = leaf_shard(full, spec);
    ledger->reset();
    ShardTensor y = redistribute(x, {R, R});
    CHECK(ledger->calls("redistribute", "all_gather_v", "ddp") == 1);
    CHECK(ledger->calls("redistribute", "all_gather_v", "domain") == 1);
    CHECK(ledger->total_calls() == 2);
    // Slices first, gathers last, and of two gathers the one in axis order first: ddp moves this rank's
    // block, domain the ddp-gathered one.
    CHECK(ledger->bytes("redistribute", "all_gather_v", "ddp") == local_bytes * (gshape.first - 1));

    // Axes trading dims: S(1) -> R over ddp, S(2) -> S(1) over domain, then the local R -> S(2) slice.
    ledger->reset();
    ShardTensor z = redistribute(x, {S(2), S(1)});
    CHECK(ledger->calls("redistribute", "all_gather_v", "ddp") == 1);
    CHECK(ledger->calls("redistribute", "all_to_all_v", "domain") == 1);
    CHECK(ledger->total_calls() == 2);
    ledger->reset();
    backward_global(z, rnd(shape, 9));
    CHECK(ledger->calls("redistribute.backward", "all_gather_v", "ddp") == 1);     // adjoint of the slice
    CHECK(ledger->calls("redistribute.backward", "all_to_all_v", "domain") == 1);  // adjoint of the all-to-all
    CHECK(ledger->total_calls() == 2);                                             // the gather's adjoint is local

    // Local slices come before the collectives, so these move only the sliced block.
    const auto er = split_extents(7, gshape.first), ec = split_extents(5, gshape.second);
    const int c0 = mesh.coords()[0], c1 = mesh.coords()[1];
    Tensor part = iota({7, 5});
    set_requires_grad(part);
    ledger->reset();
    redistribute(from_local(part, mesh, {P, R}, std::nullopt, {.allow_partial = true}), {R, S(0)});
    CHECK(ledger->calls("redistribute", "all_reduce", "ddp") == 1);
    CHECK(ledger->bytes("redistribute", "all_reduce", "ddp") ==
          split_extents(7, gshape.second)[c1] * 5 * 8 * (gshape.first - 1));
    CHECK(ledger->total_calls() == 1);
    const ShardSpec rows(mesh, {S(0), R}, {7, 5}, {er, {}});
    ShardTensor x_rows = from_local(window(part, rows).clone(), mesh, {S(0), R}, rows.all_extents());
    ledger->reset();
    redistribute(x_rows, {R, S(1)});
    CHECK(ledger->calls("redistribute", "all_gather_v", "ddp") == 1);
    CHECK(ledger->bytes("redistribute", "all_gather_v", "ddp") == er[c0] * ec[c1] * 8 * (gshape.first - 1));
    CHECK(ledger->total_calls() == 1);
  }
}

TEST_CASE("redistribute: bad targets are typed errors on every rank", "[core][redistribute][errors]") {
  const Mesh mesh = world_1d();
  const ShardTensor x = distribute(iota({4, 3}), mesh, {S(0)});
  CHECK_THROWS_AS(redistribute(x, {P}), MissingShardPatch);
  CHECK_THROWS_WITH(redistribute(x, {P}), Catch::Contains("redistribute") && Catch::Contains("(S(0)) -> (P)"));
  CHECK_THROWS_AS(redistribute(x, {R, R}), ValueError);
  CHECK_THROWS_WITH(redistribute(x, {R, R}), Catch::Contains("redistribute") && Catch::Contains("2 placements"));
  CHECK_THROWS_AS(redistribute(x, {S(2)}), ValueError);
  CHECK_THROWS_WITH(redistribute(x, {S(2)}), Catch::Contains("S(2)") && Catch::Contains("[4, 3]"));
  CHECK_THROWS_AS(redistribute(ShardTensor(), {R}), ValueError);
  for (auto g : grids()) {
    const Mesh m2 = grid(g);
    const ShardTensor y = distribute(iota({4, 3}), m2, {S(0), R});
    CHECK_THROWS_AS(redistribute(y, {S(1), S(1)}), ValueError);
    CHECK_THROWS_WITH(redistribute(y, {S(1), S(-1)}), Catch::Contains("sharded by both axis 'ddp' and axis 'domain'"));
    CHECK_THROWS_AS(redistribute(y, {S(0), P}), MissingShardPatch);
  }
}
