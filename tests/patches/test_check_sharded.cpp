// check_sharded self-tests: correct sharded functions pass against the serial fp64 oracle (outputs, input grads,
// parameter grads), and deliberately wrong ones fail on every rank — a partial sum left unreduced, a parameter
// grad left partial — as do vacuous cases (nothing sharded, all-zero grads). The verdict is the same on every rank.
#include <catch2/catch.hpp>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "tests/patches/patch_testing.h"
#include "patches/check_sharded.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// Identity forward; backward sums the grad over the given mesh axes. What a patch does for a replicated
// parameter that meets data sharded over those axes (each rank's grad is then only its shard's contribution).
// `share` scales the sum: the ranks of the batch axes sharding the samples (see reduce_param_grads).
struct SumGradCtx {
  Mesh mesh;
  std::vector<std::string> axes;
  double share = 1;
};
std::vector<Tensor> sum_grad_backward(SumGradCtx& ctx, const std::vector<Tensor>& g) {
  Tensor s = g[0].contiguous().clone();
  for (const std::string& a : ctx.axes) ctx.mesh.axis(a).all_reduce(s);
  return {mul_scalar(s, ctx.share)};
}
Tensor sum_grad_over(const Tensor& w, const Mesh& mesh, std::vector<std::string> axes, double share = 1) {
  return record("test:sum_grad_over", {w}, w.detach(), SumGradCtx{mesh, std::move(axes), share}, sum_grad_backward);
}

// The number of ranks over the batch axes sharding x: a rank's grad times it is its estimate of the batch's.
double batch_share(const ShardTensor& x) {
  double ranks = 1;
  for (int m = 0; m < x.mesh().ndim(); ++m)
    if (x.mesh().is_batch_axis(m) && x.placements()[m].is_shard()) ranks *= x.mesh().shape()[m];
  return ranks;
}

// The axes sharding x, domain-role ones only unless `with_batch` (the rule: a patch sums a parameter's grad over
// the domain axes; the batch axes are the optimizer's, check_sharded's reduce_batch_grads).
std::vector<std::string> shard_axes(const ShardTensor& x, bool with_batch = false) {
  std::vector<std::string> axes;
  for (int m = 0; m < x.mesh().ndim(); ++m)
    if (x.placements()[m].is_shard() && (with_batch || !x.mesh().is_batch_axis(m)))
      axes.push_back(x.mesh().axis_names()[m]);
  return axes;
}

// y = x W with x's rows sharded: no forward collective; W's grad must be summed over the sharding domain axes
// (`over_batch_too`: also over the batch axes, which counts the batch twice).
ShardedFn linear_rows(bool reduce_weight_grad, bool over_batch_too = false) {
  return [=](const std::vector<ShardTensor>& in, const std::vector<Tensor>& params) {
    const ShardTensor& x = in[0];
    const Tensor w =
        reduce_weight_grad ? sum_grad_over(params[0], x.mesh(), shard_axes(x, over_batch_too), batch_share(x))
                           : params[0];
    return std::vector<ShardTensor>{from_local(matmul(x.local(), w), x.mesh(), x.placements(), x.spec().all_extents())};
  };
}

// Column sums over x's sharded rows: the local sum is this rank's part, Partial over the axis sharding the rows;
// redistributing it to `to` completes it. Labelling the part Replicate instead forgets the reduction.
ShardedFn column_sums(bool label_partial, Placement to_on_row_axis) {
  return [=](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const ShardTensor& x = in[0];
    const int m = x.spec().axis_sharding(0);
    Placements part(x.mesh().ndim(), R), to(x.mesh().ndim(), R);
    if (m >= 0) {
      part[m] = label_partial ? Placement::Partial() : R;
      to[m] = to_on_row_axis;
    }
    ShardTensor s = from_local(sum(x.local(), {0}), x.mesh(), part, AxisExtents{}, {.allow_partial = true});
    return std::vector<ShardTensor>{redistribute(s, label_partial ? to : part)};
  };
}

ShardedCase rows_case(const std::string& name, Placements placements, AxisExtents extents,
                      int64_t rows) {
  ShardedCase c;
  c.name = name;
  c.inputs = {rnd({rows, 3}, 21)};
  c.placements = {std::move(placements)};
  c.extents = {std::move(extents)};
  c.params = {rnd({3, 2}, 22)};
  return c;
}

}  // namespace

TEST_CASE("check_sharded: correct sharded functions pass, 1-D mesh, uneven and zero-size rows", "[core][check]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size();
  // A zero-size shard at coordinate 1 needs three ranks: on two, the other rank would hold everything, which
  // the harness rightly rejects as not sharded.
  for (const auto& ext : {split_extents(2 * n + 1, n), split_around_zero(2 * n + 1, n)}) {
    const std::string layout = ext == split_extents(2 * n + 1, n) ? " (split rule)" : " (zero-size shard)";
    const ShardedCase c = rows_case("linear rows" + layout, {S(0)}, {ext}, total(ext));
    ShardedCheckResult r = check_sharded(mesh, linear_rows(true), c);
    INFO(r.report);
    CHECK(r.ok);
    CHECK(r.max_abs_error <= 1e-12);
    CHECK_THAT(r.report, Catch::Contains("output 0 (S(0))") && Catch::Contains("input 0 grad (S(0))") &&
                             Catch::Contains("param 0 grad") && Catch::Contains("verdict: ok"));

    ShardedCase sums = c;
    sums.params.clear();
    sums.name = "column sums -> R" + layout;
    r = check_sharded(mesh, column_sums(true, R), sums);
    INFO(r.report);
    CHECK(r.ok);
    sums.name = "column sums -> S(0) (reduce-scatter)" + layout;
    r = check_sharded(mesh, column_sums(true, S(0)), sums);
    INFO(r.report);
    CHECK(r.ok);
  }
}

TEST_CASE("check_sharded: several outputs, one backward", "[core][check]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size();
  ShardedCase c = rows_case("gathered rows and column sums", {S(0)}, {}, 2 * n + 1);
  c.params.clear();
  const ShardedFn fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    std::vector<ShardTensor> out = column_sums(true, S(0))(in, p);
    out.push_back(redistribute(in[0], Placements(in[0].mesh().ndim(), R)));
    return out;
  };
  const ShardedCheckResult r = check_sharded(mesh, fn, c);
  INFO(r.report);
  CHECK(r.ok);
  CHECK_THAT(r.report, Catch::Contains("output 1"));
}

TEST_CASE("check_sharded: ddp x domain grids, rows sharded over either axis, and redistribute vs the oracle",
          "[core][check]") {
  for (auto g : grids()) {
    const Mesh mesh = grid(g);
    for (int rows_axis : {0, 1}) {
      if (mesh.shape()[rows_axis] == 1 && mesh.size() > 1) continue;  // a size-1 axis splits nothing
      Placements p{R, R};
      p[rows_axis] = S(0);
      const ShardedCase c = rows_case("linear rows " + placements_str(p), p, {}, 2 * mesh.size() + 1);
      ShardedCheckResult r = check_sharded(mesh, linear_rows(true), c);
      INFO(r.report);
      CHECK(r.ok);
      if (mesh.is_batch_axis(rows_axis) && mesh.shape()[rows_axis] > 1) {
        // The patch summing W's grad over ddp as well: counted twice.
        r = check_sharded(mesh, linear_rows(true, /*over_batch_too=*/true), c);
        INFO(r.report);
        CHECK_FALSE(r.ok);
        CHECK(same_on_every_rank(r.ok));
      }
      ShardedCase sums = c;
      sums.params.clear();  // unused: its grad would be zero, which the harness rejects as vacuous
      sums.name = "column sums " + placements_str(p) + " -> S(0)";
      r = check_sharded(mesh, column_sums(true, S(0)), sums);
      INFO(r.report);
      CHECK(r.ok);
    }
    // redistribute itself against the serial result: (S(1), S(2)) with uneven and zero-size shards.
    const auto e0 = split_extents(2 * g.first + 1, g.first), e1 = split_around_zero(2 * g.second + 1, g.second);
    for (const Placements& to : {Placements{R, R}, Placements{S(2), S(1)}, Placements{S(0), S(1)}}) {
      ShardedCase c;
      c.name = "redistribute (S(1), S(2)) -> " + placements_str(to);
      c.inputs = {rnd({2, total(e0), total(e1)}, 31)};
      c.placements = {{S(1), S(2)}};
      c.extents = {{e0, e1}};
      const ShardedCheckResult r = check_sharded(
          mesh,
          [to](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
            return std::vector<ShardTensor>{redistribute(in[0], to)};
          },
          c);
      INFO(r.report);
      CHECK(r.ok);
      CHECK(r.max_abs_error == 0);
    }
  }
}

TEST_CASE("check_sharded: Partial inputs arrive as rank-distinct parts and get complete grads", "[core][check]") {
  const Mesh mesh = world_1d();
  const auto to_replicate = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{redistribute(in[0], Placements(in[0].mesh().ndim(), R))};
  };
  ShardedCase c;
  c.name = "Partial input -> R";
  c.inputs = {rnd({5, 3}, 41)};
  c.placements = {{Placement::Partial()}};
  ShardedCheckResult r = check_sharded(mesh, to_replicate, c);
  INFO(r.report);
  CHECK(r.ok);

  // Negative control: taking this rank's part for the value.
  c.name = "a part taken for the value";
  r = check_sharded(
      mesh,
      [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
        const ShardTensor& x = in[0];
        return std::vector<ShardTensor>{from_local(x.local(), x.mesh(), Placements(x.mesh().ndim(), R))};
      },
      c);
  INFO(r.report);
  CHECK(r.ok == (mesh.size() == 1));
  CHECK(same_on_every_rank(r.ok));

  for (auto g : grids()) {
    const Mesh m2 = grid(g);
    c.name = "(P, S(0)) -> (R, R)";
    c.inputs = {rnd({2 * g.second + 1, 3}, 42)};
    c.placements = {{Placement::Partial(), S(0)}};
    r = check_sharded(m2, to_replicate, c);
    INFO(r.report);
    CHECK(r.ok);
  }
}

TEST_CASE("check_sharded negative controls: forgotten reductions fail on every rank", "[core][check]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size();
  const bool sharded = n > 1;  // on one rank nothing is partial, so the "wrong" functions are right
  const ShardedCase c = rows_case("negative control", {S(0)}, {split_extents(2 * n + 1, n)}, 2 * n + 1);

  ShardedCheckResult r = check_sharded(mesh, linear_rows(false), c);  // W's grad left partial
  INFO(r.report);
  CHECK(r.ok == !sharded);
  CHECK(same_on_every_rank(r.ok));
  if (sharded) CHECK_THAT(r.report, Catch::Contains("param 0 grad") && Catch::Contains("NOT identical on every rank"));

  ShardedCase sums = c;
  sums.params.clear();
  r = check_sharded(mesh, column_sums(false, R), sums);  // the partial sum labelled Replicate
  INFO(r.report);
  CHECK(r.ok == !sharded);
  CHECK(same_on_every_rank(r.ok));
  if (sharded) CHECK(r.max_abs_error > 1e-3);

  // A mix-up only a 2-D mesh shows: rows sharded over one axis, W's grad summed over the other.
  for (auto g : grids()) {
    const Mesh m2 = grid(g);
    const int rows_axis = g.second > 1 ? 1 : 0;
    Placements p{R, R};
    p[rows_axis] = S(0);
    const ShardedCase c2 = rows_case("W's grad summed over the wrong axis", p, {}, 2 * m2.size() + 1);
    const ShardedFn wrong_axis = [rows_axis](const std::vector<ShardTensor>& in, const std::vector<Tensor>& params) {
      const ShardTensor& x = in[0];
      const Tensor w = sum_grad_over(params[0], x.mesh(), {x.mesh().axis_names()[1 - rows_axis]});
      return std::vector<ShardTensor>{
          from_local(matmul(x.local(), w), x.mesh(), x.placements(), x.spec().all_extents())};
    };
    r = check_sharded(m2, wrong_axis, c2);
    INFO(r.report);
    CHECK(r.ok == (m2.size() == 1));
    CHECK(same_on_every_rank(r.ok));
  }
}

TEST_CASE("check_sharded anti-vacuity: unsharded inputs and all-zero grads fail", "[core][check]") {
  const Mesh mesh = world_1d();
  const int n = mesh.size();
  ShardedCase c = rows_case("replicated input", {R}, {}, 2 * n + 1);
  ShardedCheckResult r = check_sharded(mesh, linear_rows(true), c);
  INFO(r.report);
  CHECK(r.ok == (n == 1));
  if (n > 1) CHECK_THAT(r.report, Catch::Contains("sharding: INACTIVE"));

  // Everything on one rank is not sharding either.
  if (n > 1) {
    std::vector<int64_t> one_rank_holds_all(n, 0);
    one_rank_holds_all[0] = 5;
    c = rows_case("one rank holds every row", {S(0)}, {one_rank_holds_all}, 5);
    r = check_sharded(mesh, linear_rows(true), c);
    INFO(r.report);
    CHECK_FALSE(r.ok);
  }

  c = rows_case("zero weight", {S(0)}, {}, 2 * n + 1);
  c.params = {zeros({3, 2}, {DType::f64})};  // x's grad g W^T is zero: a comparison of 0 with 0 proves nothing
  r = check_sharded(mesh, linear_rows(true), c);
  INFO(r.report);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.report, Catch::Contains("input 0 grad (S(0)): ") && Catch::Contains("all zero (vacuous)"));
  CHECK(same_on_every_rank(r.ok));
}

TEST_CASE("check_sharded: a malformed case is a ValueError", "[core][check][errors]") {
  const Mesh mesh = world_1d();
  ShardedCase c = rows_case("malformed", {S(0)}, {}, 4);
  c.placements.push_back({R});
  CHECK_THROWS_AS(check_sharded(mesh, linear_rows(true), c), ValueError);
  c = rows_case("malformed", {S(0)}, {}, 4);
  c.input_requires_grad = {true, false};
  CHECK_THROWS_AS(check_sharded(mesh, linear_rows(true), c), ValueError);
}

// ---- frozen inputs (issue 9) ------------------------------------------------------------------------------------

namespace {

// The local tensors `fn` received, one list per call: the serial oracle's leaves, then the sharded run's.
ShardedFn recording(ShardedFn fn, std::shared_ptr<std::vector<std::vector<Tensor>>> seen) {
  return [fn, seen](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    std::vector<Tensor> locals;
    for (const ShardTensor& x : in) locals.push_back(x.local());
    seen->push_back(locals);
    return fn(in, p);
  };
}

// The parity check with c.input_requires_grad, its exact collectives, and then, on both runs, the frozen inputs
// neither require nor got a grad while every other input got one (check_sharded compared its values).
void check_frozen(const Mesh& mesh, const ShardedFn& fn, const ShardedCase& c, const std::vector<ExpectedComm>& comms) {
  auto seen = std::make_shared<std::vector<std::vector<Tensor>>>();
  check_patch(mesh, recording(fn, seen), c, comms);
  REQUIRE(seen->size() == 2);
  for (const std::vector<Tensor>& call : *seen)
    for (size_t i = 0; i < call.size(); ++i) {
      INFO(c.name << ", input " << i << (c.input_requires_grad[i] ? " (trained)" : " (frozen)"));
      CHECK(requires_grad(call[i]) == c.input_requires_grad[i]);
      if (!c.input_requires_grad[i]) CHECK_FALSE(grad_of(call[i]).defined());
      else CHECK((grad_of(call[i]).defined() || call[i].numel() == 0));
    }
}

ShardedFn attention(KvStrategy strategy) {
  return [strategy](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const AttentionShardOutput o = scaled_dot_product_attention(in[0], in[1], in[2], 0.6, strategy);
    return std::vector<ShardTensor>{o.out, o.lse};
  };
}

}  // namespace

TEST_CASE("check_sharded: frozen inputs get no grad, the others the right one", "[core][check]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  // Elementwise: either operand frozen; no collective either way.
  for (bool first_frozen : {true, false}) {
    ShardedCase c = sharded_case(std::string("mul, ") + (first_frozen ? "a" : "b") + " frozen",
                                 {rnd({7, 3}, 30), rnd({7, 3}, 31)}, {on_line(S(0)), on_line(S(0))});
    c.input_requires_grad = {!first_frozen, first_frozen};
    check_frozen(line, [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      return std::vector<ShardTensor>{mul(in[0], in[1])};
    }, c, {});
  }
  // Attention, q (1, 2, 7, 3), k (1, 2, 9, 3), v (1, 2, 9, 2): q frozen, or k and v frozen. The node's backward
  // runs on every rank with its usual collectives (a packed K/V block of n keys: 2 * n * (3 + 2) f64).
  const std::vector<Tensor> qkv = {rnd({1, 2, 7, 3}, 32), rnd({1, 2, 9, 3}, 33), rnd({1, 2, 9, 2}, 34)};
  auto kv = [](int64_t n) { return 2 * n * 5 * 8; };
  const Extents ek = split_extents(9, p);
  const int64_t next = ek[(r + 1) % p];
  std::vector<ExpectedComm> ring, gathered;
  if (p > 1)
    ring = {{"scaled_dot_product_attention.forward", "ring_shift", "domain", p - 1, kv(9 - next)},
            {"scaled_dot_product_attention.backward", "ring_shift", "domain", 2 * p - 1, kv(9 - next) + kv(9)}};
  gathered = {{"scaled_dot_product_attention.forward", "all_gather_v", "domain", 1, kv(ek[r]) * (p - 1)},
              {"scaled_dot_product_attention.backward", "all_gather_v", "domain", 1, kv(ek[r]) * (p - 1)},
              {"scaled_dot_product_attention.backward", "reduce_scatter_v", "domain", 1, kv(9 - ek[r])}};
  const Placements seq = on_line(S(2));
  for (const std::vector<bool>& trained : {std::vector<bool>{false, true, true}, std::vector<bool>{true, false, false}}) {
    const std::string which = trained[0] ? "k, v frozen" : "q frozen";
    ShardedCase c = sharded_case("ring attention, " + which, qkv, {seq, seq, seq});
    c.input_requires_grad = trained;
    check_frozen(line, attention(KvStrategy::ring), c, ring);
    c.name = "all-gather attention, " + which;
    check_frozen(line, attention(KvStrategy::all_gather), c, gathered);
  }
  // q replicated, k/v sharded (the LSE fold), q frozen: dq's all-reduce still runs (every rank records the node).
  ShardedCase f = sharded_case("fold attention, q frozen", qkv, {on_line(R), seq, seq});
  f.input_requires_grad = {false, true, true};
  const int64_t rows = 2 * 7;
  check_frozen(line, attention(KvStrategy::ring), f,
               {{"scaled_dot_product_attention.forward", "all_reduce", "domain", 2,
                 all_reduce_bytes(rows, 8, p) + all_reduce_bytes(rows * 3, 8, p)},
                {"scaled_dot_product_attention.backward", "all_reduce", "domain", 1, all_reduce_bytes(rows * 3, 8, p)}});
}
