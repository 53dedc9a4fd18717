// The parity harness against known bug classes (issue 9): each patch mutant of patches/mutants.h, switched on,
// must make check_sharded fail, and the same case with Mutant::none must pass — so a parity suite that stays green
// is evidence that none of these bugs is there. Built only into test_mutants (the patches compiled again with
// -DSHARDRT_PATCH_MUTANTS, tests/meson.build), run on 2 and 4 ranks. The cases use even extents with every shard
// at least as wide as the halo, so each mutant runs on the code path it corrupts (halo_exchange, ring).
#include "patches/mutants.h"
#include "tests/patches/patch_testing.h"

#ifndef SHARDRT_PATCH_MUTANTS
#error "test_mutants must be compiled with -DSHARDRT_PATCH_MUTANTS (tests/meson.build)"
#endif

using namespace shardrt;
using namespace shardrt::test;
using shardrt::patch::Mutant;
using shardrt::patch::MutantScope;

namespace {

ShardedCheckResult run_with(Mutant m, const Mesh& mesh, const ShardedFn& fn, const ShardedCase& c) {
  const MutantScope scope(m);
  return check_sharded(mesh, fn, c);
}

// The mutant is caught (every rank agrees), and the correct code passes the very same case.
void check_caught(Mutant m, const char* what, const Mesh& mesh, const ShardedFn& fn, const ShardedCase& c) {
  const ShardedCheckResult good = run_with(Mutant::none, mesh, fn, c);
  INFO("Mutant::none on " << c.name << ":\n" << good.report);
  CHECK(good.ok);
  const ShardedCheckResult bad = run_with(m, mesh, fn, c);
  INFO("mutant " << what << " on " << c.name << ":\n" << bad.report);
  CHECK_FALSE(bad.ok);
  CHECK(same_on_every_rank(bad.ok));
  // The wrong grads are wrong by a visible margin, not a rounding: far beyond the 1e-10 tolerance.
  CHECK(bad.max_abs_error > 1e-3);
}

ShardedFn attention_ring(double scale) {
  return [scale](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const AttentionShardOutput o = scaled_dot_product_attention(in[0], in[1], in[2], scale, KvStrategy::ring);
    return std::vector<ShardTensor>{o.out, o.lse};
  };
}

// q, k, v (1, 2, 4P, 3): 4 rows and keys per rank.
ShardedCase ring_case(int p) {
  const int64_t n = 4 * p;
  return sharded_case("ring attention, 4 keys per rank",
                      {rnd({1, 2, n, 3}, 900), rnd({1, 2, n, 3}, 901), rnd({1, 2, n, 3}, 902)},
                      {on_line(S(2)), on_line(S(2)), on_line(S(2))});
}

}  // namespace

TEST_CASE("mutants: a halo backward that drops the received grads fails check_sharded", "[mutant]") {
  const Mesh& line = line_mesh();
  // conv1d kernel 3 padding 1 on shards of 5: the halo_exchange path, whose backward returns the lent slices' grads.
  ShardedCase c = sharded_case("conv1d k3 halo", {rnd({2, 2, 5 * line.size()}, 910)}, {on_line(S(2))});
  c.params = {rnd({3, 2, 3}, 911), rnd({3}, 912)};
  const ShardedFn conv1d = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    return std::vector<ShardTensor>{conv(in[0], p[0], p[1], {1}, {1}, {1})};
  };
  check_caught(Mutant::halo_drop_received_grads, "halo_drop_received_grads", line, conv1d, c);
  // Pooling takes the same halo: the mutant shows there too.
  ShardedCase pc = sharded_case("avg_pool k3 halo", {rnd({1, 2, 5 * line.size()}, 913)}, {on_line(S(2))});
  const ShardedFn pool = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{avg_pool(in[0], {3}, {1}, {1})};
  };
  check_caught(Mutant::halo_drop_received_grads, "halo_drop_received_grads", line, pool, pc);
}

TEST_CASE("mutants: a ring attention backward that reuses the first K/V block fails check_sharded", "[mutant]") {
  check_caught(Mutant::ring_reuse_first_kv_block, "ring_reuse_first_kv_block", line_mesh(), attention_ring(0.5),
               ring_case(line_mesh().size()));
}

TEST_CASE("mutants: a ring attention backward with the local LSE fails check_sharded", "[mutant]") {
  check_caught(Mutant::ring_local_lse, "ring_local_lse", line_mesh(), attention_ring(0.5),
               ring_case(line_mesh().size()));
}

TEST_CASE("mutants: a ring attention backward that skips the dK/dV home hop fails check_sharded", "[mutant]") {
  check_caught(Mutant::ring_skip_dkdv_home_hop, "ring_skip_dkdv_home_hop", line_mesh(), attention_ring(0.5),
               ring_case(line_mesh().size()));
}

TEST_CASE("mutants: a norm backward that forgets one statistic's reduction fails check_sharded", "[mutant]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  // layer_norm over a sharded normalised dim, and group_norm over a sharded spatial dim: both merge statistics.
  ShardedCase ln = sharded_case("layer_norm, normalised dim sharded", {rnd({3, 4 * p}, 920)}, {on_line(S(1))});
  ln.params = {add_scalar(mul_scalar(rnd({4 * p}, 921), 0.1), 1.0), mul_scalar(rnd({4 * p}, 922), 0.1)};
  const ShardedFn layer = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    return std::vector<ShardTensor>{layer_norm(in[0], {in[0].global_shape().back()}, w[0], w[1])};
  };
  check_caught(Mutant::norm_skip_stat_reduction, "norm_skip_stat_reduction", line, layer, ln);
  ShardedCase gn = sharded_case("group_norm, spatial dim sharded", {rnd({2, 4, 3 * p}, 923)}, {on_line(S(2))});
  gn.params = {add_scalar(mul_scalar(rnd({4}, 924), 0.1), 1.0), mul_scalar(rnd({4}, 925), 0.1)};
  const ShardedFn group = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
    return std::vector<ShardTensor>{group_norm(in[0], 2, w[0], w[1])};
  };
  check_caught(Mutant::norm_skip_stat_reduction, "norm_skip_stat_reduction", line, group, gn);
  // On a 2x2 mesh, two stat axes.
  if (has_grid()) {
    ShardedCase g2 = sharded_case("group_norm 2x2", {rnd({1, 4, 6, 4}, 926)}, {{S(2), S(3)}});
    g2.params = gn.params;
    check_caught(Mutant::norm_skip_stat_reduction, "norm_skip_stat_reduction", grid_mesh(), group, g2);
  }
}

TEST_CASE("mutants: the selector is off by default", "[mutant]") {
  CHECK(patch::active_mutant() == Mutant::none);
  CHECK_FALSE(SHARDRT_MUTANT(halo_drop_received_grads));
}
