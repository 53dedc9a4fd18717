// Placements, the split rule, ShardSpec (extents, local shapes, offsets, validation) and the construction API:
// distribute, scatter, from_local (given and inferred), full_tensor, backward_global, describe_placements. Bad
// input must be a typed error naming the op, placements and shapes, on every rank, without a hang.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "tests/patches/bad_input_testing.h"
#include "tests/patches/patch_testing.h"
#include "patches/dispatch.h"
#include "patches/domain_batch.h"
#include "patches/errors.h"
#include "patches/ops.h"

using namespace shardrt;
using namespace shardrt::test;

TEST_CASE("split_extents: the first size % n ranks get one more", "[core][spec]") {
  CHECK(split_extents(10, 4) == std::vector<int64_t>{3, 3, 2, 2});
  CHECK(split_extents(9, 4) == std::vector<int64_t>{3, 2, 2, 2});
  CHECK(split_extents(3, 4) == std::vector<int64_t>{1, 1, 1, 0});
  CHECK(split_extents(0, 3) == std::vector<int64_t>{0, 0, 0});
  CHECK(split_extents(7, 1) == std::vector<int64_t>{7});
  CHECK_THROWS_AS(split_extents(4, 0), ValueError);
  CHECK_THROWS_AS(split_extents(-1, 2), ValueError);
}

TEST_CASE("placements print and compare", "[core][spec]") {
  CHECK(S(1).str() == "S(1)");
  CHECK(R.str() == "R");
  CHECK(P.str() == "P");
  CHECK(placements_str({S(0), R}) == "(S(0), R)");
  CHECK(S(1) == S(1));
  CHECK(S(1) != S(0));
  CHECK(R != P);
}

TEST_CASE("ShardSpec: extents, local shapes and offsets on the world mesh", "[core][spec]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size(), me = mesh.rank();
  const auto ext = zero_extents(n);
  const ShardSpec spec(mesh, {S(-1)}, {4, total(ext)}, {ext});
  CHECK(spec.placement(0) == S(1));  // negative dims wrap
  CHECK(spec.axis_sharding(1) == 0);
  CHECK(spec.axis_sharding(0) == -1);
  CHECK(spec.any_shard());
  CHECK_FALSE(spec.any_partial());
  CHECK(spec.local_shape() == Shape{4, ext[me]});
  CHECK(spec.local_shape_at(0, n - 1) == Shape{4, ext[n - 1]});
  CHECK(spec.offset(0) == total(std::vector<int64_t>(ext.begin(), ext.begin() + me)));

  const ShardSpec even = ShardSpec::split_evenly(mesh, {S(0)}, {10, 3});
  CHECK(even.extents(0) == split_extents(10, n));
  CHECK(even == ShardSpec(mesh, {S(0)}, {10, 3}, {split_extents(10, n)}));
  CHECK(even != ShardSpec::split_evenly(mesh, {S(1)}, {10, 3}));
  CHECK(even.with({R}, {10, 3}, {}) == ShardSpec(mesh, {R}, {10, 3}, {}));
  CHECK_THAT(even.str(),
             Catch::StartsWith("Spec(mesh (domain=" + std::to_string(n) + "), (S(0)), global [10, 3], S(0) extents "));

  // Another mesh over the same ranks is another mesh; a copy of the handle is the same one.
  const Mesh other = world_1d();
  const Mesh copy = mesh;
  CHECK(same_mesh(mesh, copy));
  CHECK_FALSE(same_mesh(mesh, other));
  CHECK(ShardSpec::split_evenly(other, {S(0)}, {10, 3}) != even);
}

TEST_CASE("ShardSpec on ddp x domain: each axis' extents are the same whatever the other coordinate", "[core][spec]") {
  for (auto g : grids()) {
    const Mesh mesh = grid(g);
    const auto e0 = split_extents(2 * g.first + 1, g.first), e1 = zero_extents(g.second);
    const ShardSpec spec(mesh, {S(2), S(0)}, {total(e1), 3, total(e0)}, {e0, e1});
    const int c0 = mesh.coords()[0], c1 = mesh.coords()[1];
    CHECK(spec.local_shape() == Shape{e1[c1], 3, e0[c0]});
    CHECK(spec.local_shape_at(0, 0) == Shape{e1[c1], 3, e0[0]});
    CHECK(spec.local_shape_at(1, g.second - 1) == Shape{e1[g.second - 1], 3, e0[c0]});
    CHECK(spec.offset(0) == total(std::vector<int64_t>(e0.begin(), e0.begin() + c0)));
    CHECK_THAT(spec.str(), Catch::Contains("S(2) extents") && Catch::Contains("S(0) extents"));
  }
}

TEST_CASE("ShardSpec validation names the op, placements, shapes and the problem", "[core][spec][errors]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size();
  auto ext = split_extents(6, n);
  CHECK_THROWS_AS(ShardSpec(mesh, {S(0), R}, {6, 2}, {}), ValueError);
  CHECK_THROWS_WITH(ShardSpec(mesh, {S(0), R}, {6, 2}, {}, "myop"),
                    Catch::Contains("myop: 2 placements for a mesh of 1 axes") && Catch::Contains("[6, 2]"));
  CHECK_THROWS_AS(ShardSpec(mesh, {S(2)}, {6, 2}, {ext}), ValueError);
  CHECK_THROWS_WITH(ShardSpec(mesh, {S(-3)}, {6, 2}, {ext}), Catch::Contains("S(-3)") && Catch::Contains("(S(-3))"));
  CHECK_THROWS_AS(ShardSpec(mesh, {S(0)}, {7, 2}, {ext}), ShapeError);  // extents sum to 6
  CHECK_THROWS_WITH(ShardSpec(mesh, {S(0)}, {7, 2}, {ext}, "myop"),
                    Catch::Contains("myop") && Catch::Contains("sum to 6") && Catch::Contains("global extent 7") &&
                        Catch::Contains("(S(0))") && Catch::Contains("[7, 2]"));
  CHECK_THROWS_AS(ShardSpec(mesh, {S(0)}, {6, 2}, {std::vector<int64_t>(n + 1, 0)}), ShapeError);
  CHECK_THROWS_AS(ShardSpec(mesh, {S(0)}, {6, 2}, {}), ShapeError);  // a Shard axis needs its extents
  CHECK_THROWS_AS(ShardSpec(mesh, {R}, {6, 2}, {ext}), ValueError);  // extents for a non-Shard axis
  if (n > 1) {
    auto negative = ext;  // still sums to 6
    negative[1] += negative[0] + 1;
    negative[0] = -1;
    CHECK_THROWS_AS(ShardSpec(mesh, {S(0)}, {6, 2}, {negative}), ValueError);
  }
  CHECK_THROWS_AS(ShardSpec(mesh, {R}, {-1, 2}, {}), ShapeError);
  for (auto g : grids())
    CHECK_THROWS_WITH(ShardSpec::split_evenly(grid(g), {S(1), S(1)}, {3, 4}),
                      Catch::Contains("at most one mesh axis") && Catch::Contains("(S(1), S(1))"));
}

TEST_CASE("ShardTensor: the local shape must match the spec", "[core][spec][errors]") {
  const Mesh mesh = world_1d();
  const ShardSpec spec = ShardSpec::split_evenly(mesh, {S(0)}, {2 * mesh.size(), 3});
  const ShardTensor t(zeros({2, 3}, {DType::f64}), spec);
  CHECK(t.str() == "ShardTensor(f64 global [" + std::to_string(2 * mesh.size()) + ", 3] local [2, 3], (S(0)))");
  CHECK_THROWS_AS(ShardTensor(zeros({2, 4}, {DType::f64}), spec), ShapeError);
  CHECK_THROWS_WITH(ShardTensor(zeros({3, 3}, {DType::f64}), spec),
                    Catch::Contains("ShardTensor") && Catch::Contains("[2, 3]") && Catch::Contains("(S(0))"));
}

TEST_CASE("distribute: local slices without communication; grads flow into each rank's window", "[core][construct]") {
  auto ledger = std::make_shared<CommLedger>();
  for (auto g : grids()) {
    const Mesh mesh = grid(g, ledger);
    const auto e1 = zero_extents(g.second);
    Tensor full = iota({3, total(e1), 2});
    set_requires_grad(full);
    ledger->reset();
    ShardTensor x =
        distribute(full, mesh, {S(0), S(1)}, AxisExtents{split_extents(3, g.first), e1});
    CHECK(ledger->total_calls() == 0);
    CHECK(x.local().is_contiguous());
    CHECK_SAME_VALUES(x.local(), window(full, x.spec()));
    const Tensor grad = rnd(x.local().shape(), 1);
    backward(x.local(), grad);
    Tensor want = zeros(full.shape(), {DType::f64});
    window(want, x.spec()).copy_(grad);
    CHECK_SAME_VALUES(grad_of(full), want);

    const ShardTensor even = distribute(iota({5, 2}), mesh, {R, S(0)});
    CHECK(even.spec().extents(1) == split_extents(5, g.second));
  }
  const Mesh mesh = world_1d();
  CHECK_THROWS_AS(distribute(iota({4}), mesh, {P}), MissingShardPatch);
  CHECK_THROWS_AS(distribute(iota({4}), mesh, {S(1)}), ValueError);
  CHECK_THROWS_AS(distribute(iota({4}), mesh, {S(0), R}), ValueError);
  CHECK_THROWS_AS(
      distribute(iota({4}), mesh, {S(0)}, AxisExtents{Extents(mesh.size(), 5)}),
      ShapeError);
  CHECK_THROWS_AS(distribute(Tensor(), mesh, {R}), ValueError);
}

TEST_CASE("scatter: src sends only the shards; backward gathers the shard grads to src", "[core][construct]") {
  auto ledger = std::make_shared<CommLedger>();
  const Mesh mesh = world_1d(ledger);
  const int n = mesh.size(), me = mesh.rank(), src = n - 1;
  const Shape shape{std::max(n - 1, 1), 3};  // fewer rows than ranks: src's own shard is empty
  const int64_t f64 = 8;
  Tensor full;
  if (me == src) {
    full = iota(shape);
    set_requires_grad(full);
  }
  ledger->reset();
  ShardTensor x = scatter(full, src, mesh, {S(0)});
  CHECK(x.spec() == ShardSpec::split_evenly(mesh, {S(0)}, shape));
  CHECK_SAME_VALUES(x.local(), window(iota(shape), x.spec()));
  const int64_t own = x.local().numel() * f64, everything = shape_numel(shape) * f64;
  CHECK(ledger->calls("scatter", "broadcast", "domain") == 1);  // the metadata header only
  CHECK(ledger->calls("scatter", "send", "domain") == (me == src ? n - 1 : 0));
  CHECK(ledger->bytes("scatter", "send", "domain") == (me == src ? everything - own : 0));
  CHECK(ledger->calls("scatter", "recv", "domain") == (me == src ? 0 : 1));
  CHECK(ledger->calls("scatter", "all_gather_v", "domain") == 0);

  const Tensor g = rnd(shape, 4);
  ledger->reset();
  backward_global(x, g);
  CHECK(ledger->bytes("scatter.backward", "send", "domain") == (me == src ? 0 : x.local().numel() * f64));
  if (me == src) CHECK_SAME_VALUES(grad_of(full), g);

  // Without requires_grad nothing is recorded anywhere.
  Tensor plain = me == src ? iota(shape) : Tensor();
  CHECK_FALSE(requires_grad(scatter(plain, src, mesh, {S(0)}).local()));

  CHECK_THROWS_AS(scatter(plain, n, mesh, {S(0)}), ValueError);
  CHECK_THROWS_AS(scatter(plain, src, mesh, {P}), MissingShardPatch);
  CHECK_THROWS_AS(scatter(Tensor(), src, mesh, {S(0)}), ValueError);  // undefined on src: every rank throws
  CHECK_THROWS_AS(scatter(plain, src, mesh, {S(2)}), ValueError);     // known after the header, on every rank
}

TEST_CASE("scatter with a layout chosen from the shape: caller extents, zero-size shards, grads back", "[core][construct]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size(), me = mesh.rank();
  const Shape shape{2, 3 * n + 1};
  Tensor full;
  if (me == 0) {
    full = iota(shape);
    set_requires_grad(full);
  }
  // Only rank 0 knows the shape; every rank derives the same layout from the broadcast one: all columns but one on
  // the last rank, nothing on rank 0 (when there are several).
  auto layout_for = [n](const Shape& s) {
    Extents e(static_cast<size_t>(n), 1);
    if (n > 1) e[0] = 0;
    int64_t rest = s[1];
    for (int64_t v : e) rest -= v;
    e.back() += rest;
    return ScatterLayout{{S(1)}, AxisExtents{e}};
  };
  ShardTensor x = scatter(full, 0, mesh, layout_for);
  const AxisExtents want = layout_for(shape).extents;
  CHECK(x.spec().extents(0) == want[0]);
  CHECK_SAME_VALUES(x.local(), window(iota(shape), x.spec()));
  const Tensor g = rnd(shape, 5);
  backward_global(x, g);
  if (me == 0) CHECK_SAME_VALUES(grad_of(full), g);
  // Extents that do not fit the shape: the same ShapeError on every rank.
  auto bad = [](const Shape&) { return ScatterLayout{{S(1)}, AxisExtents{Extents{1}}}; };
  if (n > 1) CHECK_THROWS_AS(scatter(me == 0 ? iota(shape) : Tensor(), 0, mesh, bad), ShapeError);
}

TEST_CASE("scatter on ddp x domain: replicas receive their shard; one grad copy per shard returns",
          "[core][construct]") {
  for (auto gshape : grids()) {
    auto ledger = std::make_shared<CommLedger>();
    const Mesh mesh = grid(gshape, ledger);
    const int n = mesh.size(), me = mesh.rank(), src = 0;
    const Shape shape{3, 2 * gshape.second + 1};
    const ShardSpec spec = ShardSpec::split_evenly(mesh, {R, S(1)}, shape);
    Tensor full;
    if (me == src) {
      full = iota(shape);
      set_requires_grad(full);
    }
    ShardTensor x = scatter(full, src, mesh, {R, S(1)});
    CHECK_SAME_VALUES(x.local(), window(iota(shape), spec));
    if (me == src) {
      int64_t sent = 0;  // every other rank's shard, replicas included
      for (int q = 1; q < n; ++q) sent += spec.local_shape_at(1, q % gshape.second)[1] * 3 * 8;
      CHECK(ledger->bytes("scatter", "send", "mesh") == sent);
    }
    const Tensor g = rnd(shape, 6);
    ledger->reset();
    backward_global(x, g);
    // Only the ranks at src's ddp coordinate send (one copy of each distinct shard).
    const bool sends = me != src && mesh.coords()[0] == 0;
    CHECK(ledger->calls("scatter.backward", "send", "mesh") == (sends ? 1 : 0));
    CHECK(ledger->calls("scatter.backward", "recv", "mesh") == (me == src ? n / gshape.first - 1 : 0));
    if (me == src) CHECK_SAME_VALUES(grad_of(full), g);
  }
}

TEST_CASE("from_local: extents given (no collective) and inferred (one gather of shapes) agree", "[core][construct]") {
  auto ledger = std::make_shared<CommLedger>();
  for (auto g : grids()) {
    const Mesh mesh = grid(g, ledger);
    const auto e0 = zero_extents(g.first), e1 = split_extents(2 * g.second + 1, g.second);
    const Shape shape{total(e1), 2, total(e0)};
    const ShardSpec spec(mesh, {S(2), S(0)}, shape, {e0, e1});
    const Tensor local = window(iota(shape), spec).clone();

    ledger->reset();
    const ShardTensor given = from_local(local, mesh, {S(2), S(0)}, spec.all_extents());
    CHECK(ledger->total_calls() == 0);
    CHECK(given.spec() == spec);
    CHECK(given.local().is_same(local));

    ledger->reset();
    const ShardTensor inferred = from_local(local, mesh, {S(-1), S(0)});
    CHECK(ledger->calls("from_local", "all_gather", "mesh") == 1);
    CHECK(ledger->total_calls() == 1);
    CHECK(inferred.spec() == spec);
    {
      NoGradGuard no_grad;
      CHECK_SAME_VALUES(full_tensor(inferred), iota(shape));
    }

    // No Shard axis: nothing to infer, nothing exchanged.
    ledger->reset();
    CHECK(from_local(local, mesh, {R, P}, std::nullopt, {.allow_partial = true}).global_shape() == local.shape());
    CHECK(ledger->total_calls() == 0);
  }
}

TEST_CASE("from_local: grads reach the wrapped local tensor", "[core][construct]") {
  const Mesh mesh = world_1d();
  const auto ext = zero_extents(mesh.size());
  const ShardSpec spec(mesh, {S(0)}, {total(ext), 2}, {ext});
  Tensor local = window(iota(spec.global_shape()), spec).clone();
  set_requires_grad(local);
  const ShardTensor x = from_local(local, mesh, {S(0)});
  const Tensor full = full_tensor(x);
  CHECK_SAME_VALUES(full, iota(spec.global_shape()));
  const Tensor g = rnd(spec.global_shape(), 2);
  backward(full, g);  // full is Replicate: its grad is complete on every rank
  CHECK_SAME_VALUES(grad_of(local), window(g, spec));
}

TEST_CASE("from_local: inconsistent shapes are the same ShapeError on every rank", "[core][construct][errors]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size(), me = mesh.rank();

  // A non-sharded dim that differs on the last rank only: the verdict still reaches every rank.
  const Tensor odd = zeros({2, me == n - 1 && n > 1 ? 4 : 3}, {DType::f64});
  if (n > 1) {
    bool threw = false;
    try {
      from_local(odd, mesh, {S(0)});
    } catch (const ShapeError& e) {
      threw = true;
      CHECK_THAT(std::string(e.what()), Catch::Contains("from_local: rank " + std::to_string(n - 1)) &&
                                            Catch::Contains("[2, 4]") && Catch::Contains("[2, 3]"));
    }
    CHECK(threw);
    CHECK(same_on_every_rank(threw));
  }
  // A different tensor rank on one rank cannot desynchronise the gather.
  const Tensor rank_differs = me == 0 ? zeros({2, 3, 1}, {DType::f64}) : zeros({2, 3}, {DType::f64});
  if (n > 1) CHECK_THROWS_AS(from_local(rank_differs, mesh, {S(0)}), ShapeError);

  // Given extents: the local shape must match this rank's extent; the sum defines the global shape.
  const Tensor local = zeros({2, 3}, {DType::f64});
  CHECK_THROWS_AS(from_local(local, mesh, {S(0)}, AxisExtents{Extents(n, 3)}),
                  ShapeError);
  CHECK_THROWS_WITH(from_local(local, mesh, {S(0)}, AxisExtents{Extents(n, 3)}),
                    Catch::Contains("from_local") && Catch::Contains("[2, 3]") && Catch::Contains("(S(0))"));
  CHECK_THROWS_AS(from_local(local, mesh, {S(0)}, AxisExtents{Extents(n + 1, 2)}),
                  ShapeError);
  CHECK_THROWS_AS(from_local(local, mesh, {S(5)}), ValueError);
  CHECK_THROWS_AS(from_local(local, mesh, {S(5)}, AxisExtents{Extents(n, 2)}),
                  ValueError);
  CHECK_THROWS_AS(from_local(local, mesh, {R, R}), ValueError);
  CHECK_THROWS_AS(from_local(local, mesh, {S(0), S(1)}), ValueError);
}

namespace {

std::string stated(const Extents& e) {
  std::string s = "S(0) extents ";
  for (std::size_t j = 0; j < e.size(); ++j) {
    if (j) s += ',';
    s += std::to_string(e[j]);
  }
  return s;
}

}  // namespace

TEST_CASE("from_local, checked mode: ranks stating different extents are the same ShapeError on every rank",
          "[core][construct][errors]") {
  auto ledger = std::make_shared<CommLedger>();
  const Mesh mesh = world_1d(ledger);
  const int n = mesh.size(), me = mesh.rank();
  REQUIRE(mesh.flat().checks_collectives());  // the suite runs with SHARDRT_COMM_CHECK=1
  if (n < 2) return;
  // Rank n-1 states one more row for itself (and holds it): each rank is consistent with its own statement.
  const Extents agreed(n, 3);
  Extents odd = agreed;
  odd[n - 1] = 4;
  const Extents& mine = me == n - 1 ? odd : agreed;
  const Tensor local = zeros({mine[me], 2}, {DType::f64});
  std::string others = n == 2 ? "rank 0 states " : "ranks 0";
  for (int q = 1; q < n - 1; ++q) others += ", " + std::to_string(q);
  if (n > 2) others += " state ";
  const std::string msg = message_of([&] { from_local(local, mesh, {S(0)}, AxisExtents{mine}); });
  CHECK_THAT(msg, Catch::StartsWith("from_local: ") && Catch::Contains(others + stated(agreed)) &&
                      Catch::Contains("rank " + std::to_string(n - 1) + " states " + stated(odd)));
  CHECK(same_string_on_every_rank(msg));
  CHECK_THROWS_AS(from_local(local, mesh, {S(0)}, AxisExtents{mine}), ShapeError);

  // The same extents stated everywhere, but one rank's local shape does not fit them: every rank raises.
  const Tensor thin = zeros({me == n - 1 ? 2 : 3, 2}, {DType::f64});
  const std::string thin_msg = message_of([&] { from_local(thin, mesh, {S(0)}, AxisExtents{agreed}); });
  CHECK_THAT(thin_msg, Catch::Contains("from_local: rank " + std::to_string(n - 1)) && Catch::Contains("[2, 2]") &&
                           Catch::Contains("[3, 2]"));
  CHECK(same_string_on_every_rank(thin_msg));

  // A consistent call: the check runs (one signature-checked all-gather) but stays out of the ledger.
  const int64_t checks = mesh.flat().signature_checks();
  ledger->reset();
  const ShardTensor x = from_local(zeros({3, 2}, {DType::f64}), mesh, {S(0)}, AxisExtents{agreed});
  CHECK(x.global_shape() == Shape{3 * n, 2});
  CHECK(ledger->total_calls() == 0);
  CHECK(mesh.flat().signature_checks() == checks + 1);
}

TEST_CASE("from_local: Partial placements only when asked for", "[core][construct][errors]") {
  const Mesh mesh = world_1d();
  const Tensor part = iota({3, 2});
  CHECK_THROWS_AS(from_local(part, mesh, {P}), ValueError);
  CHECK_THROWS_WITH(from_local(part, mesh, {P}), Catch::Contains("from_local") && Catch::Contains("(P)") &&
                                                     Catch::Contains("allow_partial"));
  CHECK_THROWS_AS(from_local(part, mesh, {P}, AxisExtents{{}}), ValueError);
  const ShardTensor p = from_local(part, mesh, {P}, std::nullopt, {.allow_partial = true});
  CHECK(p.placements() == Placements{P});
  CHECK(p.local().is_same(part));
}

TEST_CASE("backward_global: each rank seeds its window; Partial roots take the whole grad", "[core][construct]") {
  const Mesh mesh = world_1d();
  const auto ext = zero_extents(mesh.size());
  const Shape shape{total(ext), 2};
  const ShardSpec spec(mesh, {S(0)}, shape, {ext});
  const Tensor g = rnd(shape, 8);

  ShardTensor x = leaf_shard(iota(shape), spec);
  backward_global(x, g);
  CHECK_SAME_VALUES(grad_of(x.local()), window(g, spec));

  Tensor part = iota(shape);
  set_requires_grad(part);
  ShardTensor p = from_local(mul_scalar(part, 2.0), mesh, {P}, std::nullopt, {.allow_partial = true});
  backward_global(p, g);
  CHECK_SAME_VALUES(grad_of(part), mul_scalar(g, 2.0));

  CHECK_THROWS_AS(backward_global(x, zeros({1, 2}, {DType::f64})), ShapeError);
  CHECK_THROWS_AS(backward_global(std::vector<ShardTensor>{x}, std::vector<Tensor>{}), ValueError);
}

TEST_CASE("describe_placements and dispatch_patch: MissingShardPatch names the op and placements", "[core][dispatch]") {
  const Mesh mesh = world_1d();
  const ShardTensor a = distribute(iota({4, 2}), mesh, {S(0)}), b = distribute(iota({4, 2}), mesh, {R});
  CHECK(describe_placements({&a, &b}) == "(S(0)) global [4, 2] and (R) global [4, 2]");
  CHECK(describe_placements({&a, &b, &a}) == "(S(0)) global [4, 2], (R) global [4, 2] and (S(0)) global [4, 2]");
  using Fn = int(const ShardTensor&, const ShardTensor&);
  const std::vector<Patch<Fn>> table = {
      {"both-replicate",
       [](const ShardTensor& x, const ShardTensor& y) {
         return x.placements()[0].is_replicate() && y.placements()[0].is_replicate();
       },
       [](const ShardTensor&, const ShardTensor&) { return 1; }},
      {"same-shard", [](const ShardTensor& x, const ShardTensor& y) { return x.placements() == y.placements(); },
       [](const ShardTensor&, const ShardTensor&) { return 2; }}};
  CHECK(dispatch_patch<int, const ShardTensor&, const ShardTensor&>("op", table, {&b, &b}, b, b) == 1);
  CHECK(dispatch_patch<int, const ShardTensor&, const ShardTensor&>("op", table, {&a, &a}, a, a) == 2);
  CHECK_THROWS_AS((dispatch_patch<int, const ShardTensor&, const ShardTensor&>("op", table, {&a, &b}, a, b)),
                  MissingShardPatch);
  CHECK_THROWS_WITH((dispatch_patch<int, const ShardTensor&, const ShardTensor&>("op", table, {&a, &b}, a, b)),
                    Catch::Contains("op: no patch for placements (S(0)) global [4, 2] and (R) global [4, 2]"));
}

TEST_CASE("inputs on different meshes: MissingShardPatch on every rank, saying so", "[core][dispatch]") {
  const Mesh one = world_1d(), other = world_1d();  // same ranks, different meshes
  const ShardTensor a = distribute(iota({4, 2}), one, {S(0)}), b = distribute(iota({4, 2}), other, {S(0)});
  bool threw = false;
  try {
    add(a, b);
  } catch (const MissingShardPatch& e) {
    threw = std::string(e.what()).find("different meshes") != std::string::npos;
  }
  CHECK(threw);
  CHECK(same_on_every_rank(threw));
}

TEST_CASE("a domain group carries one sample: a larger batch is a ShapeError on every rank", "[core][spec]") {
  Mesh mesh = world_1d();
  ShardTensor one = distribute(iota({1, 8, 3}), mesh, {S(1)});
  CHECK_NOTHROW(check_one_sample_per_domain_group("model", one));
  ShardTensor two = distribute(iota({2, 8, 3}), mesh, {S(1)});
  bool threw = false;
  try {
    check_one_sample_per_domain_group("model", two);
  } catch (const ShapeError& e) {
    threw = std::string(e.what()).find("up to 2 samples") != std::string::npos;
  }
  CHECK(threw);
  CHECK(same_on_every_rank(threw));
  // Replicated data is not domain-parallel: any batch is fine.
  CHECK_NOTHROW(check_one_sample_per_domain_group("model", distribute(iota({2, 8, 3}), mesh, {R})));
}

TEST_CASE("a domain group carries one sample: batch Shard(0) over ddp, tokens over domain", "[core][spec]") {
  for (auto g : grids()) {
    const Mesh mesh = grid(g);
    if (g.first == 1 || g.second == 1) continue;  // needs both axes
    // One sample per ddp rank, the tokens over domain: the canonical layout.
    const ShardTensor canonical = distribute(iota({g.first, 8, 3}), mesh, {S(0), S(1)});
    CHECK_NOTHROW(check_one_sample_per_domain_group("model", canonical));
    // Two samples on some ddp rank: rejected, everywhere.
    bool threw = false;
    try {
      check_one_sample_per_domain_group("model", distribute(iota({g.first + 1, 8, 3}), mesh, {S(0), S(1)}));
    } catch (const ShapeError& e) {
      threw = std::string(e.what()).find("up to 2 samples") != std::string::npos;
    }
    CHECK(threw);
    CHECK(same_on_every_rank(threw));
    // The batch dim split over the domain axis is not domain parallelism.
    threw = false;
    try {
      check_one_sample_per_domain_group("model", distribute(iota({g.second, 8, 3}), mesh, {R, S(0)}));
    } catch (const ShapeError& e) {
      threw = std::string(e.what()).find("over the domain axis 'domain'") != std::string::npos;
    }
    CHECK(threw);
  }
}
