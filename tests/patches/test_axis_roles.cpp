// Mesh axis roles and the one reduction of every parameter grad: patches sum parameter grads over the domain
// axes only, the batch (ddp) axes are reduce_batch_grads' (the optimizer's average), and check_sharded compares
// after it.
// The canonical layout — batch Shard(0) over ddp, tokens over domain — runs directly on the ddp x domain mesh.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "patches/domain_batch.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// The ddp x domain grids of this world size with more than one ddp rank (the batch axis matters there).
std::vector<std::pair<int, int>> batch_grids() {
  std::vector<std::pair<int, int>> out;
  for (auto g : grids())
    if (g.first > 1) out.push_back(g);
  return out;
}

// The layouts of a (B, T, C) activation on ddp x domain: the batch over ddp (or the same batch on every ddp rank),
// the tokens over domain where it has more than one rank.
std::vector<Placements> layouts(std::pair<int, int> g) {
  if (g.second == 1) return {{S(0), R}};
  return {{S(0), S(1)}, {R, S(1)}};
}

// The expected collectives of a patch with parameters of `param_numel` f64 elements whose activation has `x`'s
// placements: the patch's own sum over domain (where the tokens are sharded), and reduce_batch_grads' over ddp.
std::vector<ExpectedComm> param_comms(const std::string& op, std::pair<int, int> g, const Placements& x,
                                      int64_t param_numel) {
  std::vector<ExpectedComm> want;
  if (x[1].is_shard())
    want.push_back({op + ".backward", "all_reduce", "domain", 1, all_reduce_bytes(param_numel, 8, g.second)});
  want.push_back({"reduce_batch_grads", "all_reduce", "ddp", 1, all_reduce_bytes(param_numel, 8, g.first)});
  return want;
}

}  // namespace

TEST_CASE("mesh axes have roles: ddp is batch, every other axis domain, unless given", "[core][roles]") {
  const Mesh two_d = grid(grids().front());
  CHECK(two_d.axis_roles() == std::vector<AxisRole>{AxisRole::batch, AxisRole::domain});
  CHECK(two_d.is_batch_axis(0));
  CHECK_FALSE(two_d.is_batch_axis(1));
  CHECK(two_d.sub("ddp").axis_roles() == std::vector<AxisRole>{AxisRole::batch});
  CHECK(two_d.sub("domain").axis_roles() == std::vector<AxisRole>{AxisRole::domain});
  const Mesh named(MPI_COMM_WORLD, {"ddp", "x"}, {1, -1});
  CHECK(named.axis_roles() == std::vector<AxisRole>{AxisRole::batch, AxisRole::domain});
  const Mesh given(MPI_COMM_WORLD, {"samples", "x"}, {1, -1}, {AxisRole::batch, AxisRole::domain});
  CHECK(given.is_batch_axis(0));
  CHECK(world_1d().axis_roles() == std::vector<AxisRole>{AxisRole::domain});
  CHECK_THROWS_AS(Mesh(MPI_COMM_WORLD, {"ddp", "x"}, {1, -1}, {AxisRole::batch}), ValueError);
  CHECK(std::string(axis_role_name(AxisRole::batch)) == "batch");
}

TEST_CASE("linear on ddp x domain: W's grad summed over domain by the patch, over ddp once by reduce_batch_grads",
          "[patch][roles][np6]") {
  for (auto g : batch_grids()) {
    const Mesh mesh = grid(g, std::make_shared<CommLedger>());
    for (const Placements& p : layouts(g)) {
      const int64_t batch = p[0].is_shard() ? 2 * g.first + 1 : 2;  // uneven over ddp
      ShardedCase c = sharded_case("linear " + placements_str(p), {rnd({batch, 7, 3}, 1)}, {p});
      c.params = {rnd({4, 3}, 2), rnd({4}, 3)};
      const ShardedFn fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
        return std::vector<ShardTensor>{linear(in[0], w[0], w[1])};
      };
      check_patch(mesh, fn, c, param_comms("linear", g, p, 16));
    }
  }
}

TEST_CASE("layer_norm and conv on ddp x domain: parameter grads are reduced exactly once", "[patch][roles][np6]") {
  for (auto g : batch_grids()) {
    const Mesh mesh = grid(g, std::make_shared<CommLedger>());
    for (const Placements& p : layouts(g)) {
      const int64_t batch = p[0].is_shard() ? 2 * g.first + 1 : 2;
      ShardedCase c = sharded_case("layer_norm " + placements_str(p), {rnd({batch, 7, 5}, 4)}, {p});
      c.params = {rnd({5}, 5), rnd({5}, 6)};
      const ShardedFn ln = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
        return std::vector<ShardTensor>{layer_norm(in[0], {5}, w[0], w[1])};
      };
      check_patch(mesh, ln, c, param_comms("layer_norm", g, p, 10));
    }
    // conv1d over (B, C, L): the batch over ddp, L over domain (a halo exchange there), k3 p1.
    const Placements p = {S(0), g.second > 1 ? S(2) : R};
    ShardedCase c = sharded_case("conv1d " + placements_str(p), {rnd({2 * g.first + 1, 2, 9}, 7)}, {p});
    c.params = {rnd({3, 2, 3}, 8), rnd({3}, 9)};
    const ShardedFn conv1 = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
      return std::vector<ShardTensor>{conv(in[0], w[0], w[1], {1}, {1})};
    };
    // L = 9 over domain: every shard >= 1 slice, the neighbour exchange of h = 1 slice of this rank's (B, C)
    // block, forward and backward; the w|b grads (3*2*3 + 3) summed over domain by the patch (never over ddp),
    // over ddp once by reduce_batch_grads.
    std::vector<ExpectedComm> want;
    if (g.second > 1) {
      const int dc = mesh.coord("domain");
      const int64_t b_local = split_extents(2 * g.first + 1, g.first)[mesh.coord("ddp")];
      const int64_t hb = halo_bytes(dc, g.second, 1, b_local * 2 * 8);
      want = {{"conv.forward", "halo_exchange", "domain", 1, hb}, {"conv.backward", "halo_exchange", "domain", 1, hb}};
    }
    for (const ExpectedComm& e : param_comms("conv", g, p, 3 * 2 * 3 + 3)) want.push_back(e);
    check_patch(mesh, conv1, c, want);
  }
}

TEST_CASE("reduce_batch_grads averages parameter grads over the batch axes only, in place", "[core][roles]") {
  for (auto g : grids()) {
    const Mesh mesh = grid(g, std::make_shared<CommLedger>());
    Tensor w = rnd({3, 2}, 10);
    set_requires_grad(w);
    // Each rank's grad: its ddp coordinate + 1 times ones, so the mean over ddp is (ddp + 1) / 2 everywhere.
    const Tensor y = sum(mul_scalar(w, mesh.coords()[0] + 1.0));
    backward({y}, {ones({}, {DType::f64})});
    reduce_batch_grads(mesh, {w, Tensor()});
    const double want = (g.first + 1) / 2.0;
    for (double v : grad_of(w).to_vector()) CHECK(v == want);
    CHECK(mesh.flat().ledger().calls("reduce_batch_grads", "all_reduce", "ddp") == (g.first > 1 ? 1 : 0));
    CHECK(mesh.flat().ledger().calls("reduce_batch_grads", "all_reduce", "domain") == 0);
  }
}

TEST_CASE("a plain Tensor operand is a parameter: add(x, bias) and matmul(x, W) on ddp x domain",
          "[patch][roles][np6]") {
  for (auto g : batch_grids()) {
    const Mesh mesh = grid(g, std::make_shared<CommLedger>());
    for (const Placements& p : layouts(g)) {
      const int64_t batch = p[0].is_shard() ? 2 * g.first + 1 : 2;
      ShardedCase c = sharded_case("add " + placements_str(p), {rnd({batch, 7, 3}, 11)}, {p});
      c.params = {rnd({3}, 12)};
      const ShardedFn add_bias = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
        return std::vector<ShardTensor>{add(in[0], w[0])};
      };
      check_patch(mesh, add_bias, c, param_comms("add", g, p, 3));
      c.name = "matmul " + placements_str(p);
      c.params = {rnd({3, 4}, 13)};
      const ShardedFn times_w = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
        return std::vector<ShardTensor>{matmul(in[0], w[0])};
      };
      check_patch(mesh, times_w, c, param_comms("matmul", g, p, 12));
    }
  }
}
