// The zero3 mode (FSDP2 / ZeRO-3, optim/zero3.cpp): the ViT and FLARE in fp64 on every mesh of this world size give
// the single-rank run's parameters within 1e-10; the ledger of one training step (per-block all_gathers in forward
// and backward, per-block reduce_scatters, the root unit's step collectives); the allocator's peak of a step below
// the ZeRO-2 (`ddp`) mode's by what the parameter bytes say; the block hooks' bookkeeping.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "optim/optimizer.h"
#include "runtime/allocator.h"
#include "tests/models/golden_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::optim;
using namespace shardrt::test;

namespace {

// Every ddp x domain split of this world size: ddp P first.
std::vector<std::pair<int, int>> meshes() {
  std::vector<std::pair<int, int>> out;
  for (int d = 1; d <= world_size(); ++d)
    if (world_size() % d == 0) out.push_back({world_size() / d, d});
  return out;
}

// A batch of `batch` samples for the model's floating inputs, shaped like the golden's (batch dim replaced), and a
// grad for its output; drawn from `seed`.
struct Batch {
  std::map<std::string, Tensor> inputs;
  Tensor grad_out;
};
Batch make_batch(const Golden& g, int64_t batch, uint64_t seed) {
  Batch b;
  uint64_t k = 0;
  for (const std::string& name : g.input_names) {
    Shape s = g.inputs.at(name).shape();
    s[0] = batch;
    b.inputs[name] = rnd(s, 100 * seed + 10 * k++ + 1);
  }
  Shape o = g.output.shape();
  o[0] = batch;
  b.grad_out = rnd(o, 100 * seed + 99);
  return b;
}

// One forward and backward of `model` on `mesh` with batch `b`.
void forward_backward(const Mesh& mesh, models::Model& model, const Batch& b) {
  std::map<std::string, ShardTensor> in;
  for (const auto& [name, t] : b.inputs) {
    const AxisExtents e = model.input_extents(name, t.shape(), mesh);  // empty: split_extents
    in[name] = distribute(t, mesh, model.input_placements(name, t.shape(), mesh),
                          e.empty() ? std::nullopt : std::optional<AxisExtents>(e));
  }
  backward_global(model.forward(in)[0], b.grad_out);
}

OptimizerConfig recipe(ShardingMode mode, Algorithm a = Algorithm::adamw) {
  OptimizerConfig c;
  c.mode = mode;
  c.algorithm = a;
  // eps 1e-6: as in test_sharded_optim.cpp, exact-zero grads (the qkv bias's key third) are rounding noise.
  c.adamw = {.lr = 1e-2, .eps = 1e-6, .weight_decay = 0.01};
  c.muon = {.lr = 2e-2, .weight_decay = 1e-3};
  c.max_grad_norm = a == Algorithm::adamw ? 0 : 0.5;
  c.schedule = warmup_cosine_schedule(1, 4, 0.1, 0.1);
  return c;
}

std::vector<std::vector<double>> trained(const Mesh& mesh, const Golden& g, OptimizerConfig cfg, int64_t batch,
                                         int steps) {
  auto model = golden_model(g);
  Optimizer opt(mesh, *model, cfg);
  for (int s = 0; s < steps; ++s) {
    forward_backward(mesh, *model, make_batch(g, batch, static_cast<uint64_t>(s)));
    REQUIRE(opt.step());
  }
  opt.summon_parameters();
  std::vector<std::vector<double>> out;
  for (const auto& [name, p] : model->named_parameters()) out.push_back(p.to_vector());
  return out;
}

// Rank 0's single-rank run, broadcast.
std::vector<std::vector<double>> single_rank(const Golden& g, OptimizerConfig cfg, int64_t batch, int steps) {
  std::vector<std::vector<double>> v;
  if (world_rank() == 0) v = trained(Mesh(MPI_COMM_SELF, 1, 1), g, cfg, batch, steps);
  else
    for (const auto& [name, p] : golden_model(g)->named_parameters()) v.push_back(std::vector<double>(p.numel()));
  for (auto& x : v) MPI_Bcast(x.data(), static_cast<int>(x.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return v;
}

double max_rel(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t k = 0; k < want[i].size(); ++k)
      err = std::fmax(err, std::fabs(got[i][k] - want[i][k])), scale = std::fmax(scale, std::fabs(want[i][k]));
  return err / scale;
}

}  // namespace

TEST_CASE("zero3: ViT and FLARE in fp64 on every mesh, parameters after 3 steps equal the single-rank run's within "
          "1e-10",
          "[optim][zero3]") {
  struct Run {
    std::string golden;
    Algorithm algorithm;
  };
  // Muon + AdamW on the ViT: whole matrices inside each block's own shards, and clipping across the blocks' shards.
  for (const Run& run : {Run{"vit2d", Algorithm::muon_adamw}, Run{"flare_irregular", Algorithm::adamw}}) {
    const Golden g = load_golden(run.golden);
    for (auto grid_shape : meshes()) {
      const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
      const int64_t batch = grid_shape.first;
      const auto want = single_rank(g, recipe(ShardingMode::replicated, run.algorithm), batch, 3);
      const auto got = trained(mesh, g, recipe(ShardingMode::zero3, run.algorithm), batch, 3);
      std::vector<std::vector<double>> initial;
      for (const auto& [name, p] : golden_model(g)->named_parameters()) initial.push_back(p.to_vector());
      INFO(run.golden << " " << algorithm_name(run.algorithm) << " on " << mesh.str());
      CHECK(max_rel(want, initial) > 1e-4);  // the steps moved the parameters
      CHECK(max_rel(got, want) <= 1e-10);
    }
  }
}

TEST_CASE("zero3: the blocks are the model's stages / blocks; their parameters are released between uses and "
          "read back after summon_parameters",
          "[optim][zero3]") {
  const Golden g = load_golden("vit2d");
  const Mesh mesh = grid(meshes().front(), std::make_shared<CommLedger>());
  auto model = golden_model(g);
  const auto before = model->named_parameters();
  std::vector<std::vector<double>> initial;
  for (const auto& [name, p] : before) initial.push_back(p.to_vector());
  Optimizer opt(mesh, *model, recipe(ShardingMode::zero3));
  CHECK(opt.zero3_block_names() == std::vector<std::string>{"stages.0", "stages.1"});
  const auto params = model->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const bool in_block = params[i].first.rfind("stages.", 0) == 0;
    INFO(params[i].first);
    CHECK(params[i].second.storage()->resident() == !in_block);  // the root unit stays whole
    if (in_block) CHECK_THROWS_WITH(params[i].second.to_vector(), Catch::Contains("released"));
  }
  opt.summon_parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK(params[i].second.to_vector() == initial[i]);
  // A forward releases each block again after its use; the last block is kept for its backward, which the
  // step closes.
  forward_backward(mesh, *model, make_batch(g, meshes().front().first, 0));
  opt.step();
  for (const auto& [name, p] : params)
    if (name.rfind("stages.", 0) == 0) CHECK_FALSE(p.storage()->resident());
  OptimizerConfig bad = recipe(ShardingMode::zero3);
  bad.zero3_blocks = {"stages.7"};
  auto other = golden_model(g);
  CHECK_THROWS_WITH(Optimizer(mesh, *other, bad), Catch::Contains("'stages.7' is not a module"));
}

TEST_CASE("zero3 ledger: one step's exact collectives — per-block all_gathers in forward and backward, per-block "
          "reduce_scatters, the root unit's reduce_scatter and all_gather",
          "[optim][zero3][ledger]") {
  const Golden g = load_golden("vit2d");
  for (auto grid_shape : meshes()) {
    const int ddp = grid_shape.first;
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    auto model = golden_model(g);
    OptimizerConfig cfg = recipe(ShardingMode::zero3);
    cfg.max_grad_norm = 1.0;
    Optimizer opt(mesh, *model, cfg);
    const Batch b = make_batch(g, ddp, 0);
    mesh.flat().ledger().reset();
    forward_backward(mesh, *model, b);
    opt.step();
    // Group 0 is the root unit (pos_embed, patch_embed, head); groups 1, 2 the two stages.
    REQUIRE(opt.num_groups() == 3);
    const int64_t root_total = opt.layout(0).total(), root_shard = opt.layout(0).shard_numel;
    const int64_t block_total = opt.layout(1).total(), block_shard = opt.layout(1).shard_numel;
    REQUIRE(opt.layout(2).total() == block_total);
    std::vector<ExpectedComm> want;
    if (ddp > 1) {
      // Forward: stage 0 gathered as it starts, stage 1 prefetched meanwhile. Backward: stage 1 kept from its
      // forward, stage 0 prefetched as stage 1's backward starts. One reduce_scatter per stage.
      want.push_back({"zero3.gather_forward", "all_gather", "ddp", 2, 2 * block_shard * 8 * (ddp - 1)});
      want.push_back({"zero3.gather_backward", "all_gather", "ddp", 1, block_shard * 8 * (ddp - 1)});
      want.push_back({"zero3.reduce_grads", "reduce_scatter", "ddp", 2, 2 * (block_total - block_shard) * 8});
      want.push_back({"optimizer.reduce_grads", "reduce_scatter", "ddp", 1, (root_total - root_shard) * 8});
      want.push_back({"optimizer.clip", "all_reduce", "ddp", 1, all_reduce_bytes(1, 8, ddp)});
      want.push_back({"optimizer.gather_params", "all_gather", "ddp", 1, root_shard * 8 * (ddp - 1)});
    }
    // Every optimizer / zero3 line is one of these (the model's own collectives, under its ops' scopes, are the
    // models suite's business).
    std::vector<LedgerEntry> got;
    for (const LedgerEntry& e : mesh.flat().ledger().entries())
      if (e.calls > 0 && (e.scope.rfind("zero3", 0) == 0 || e.scope.rfind("optimizer", 0) == 0)) got.push_back(e);
    INFO("mesh " << mesh.str() << ", rank " << world_rank() << " ledger:\n" << mesh.flat().ledger().table());
    CHECK(got.size() == want.size());
    for (const ExpectedComm& w : want) {
      bool found = false;
      for (const LedgerEntry& e : got)
        found = found || (e.scope == w.scope && e.kind == w.kind && e.axis == w.axis && e.calls == w.calls &&
                          e.bytes_sent == w.bytes);
      INFO(w.scope << " " << w.kind << " " << w.axis << " calls " << w.calls << " bytes " << w.bytes);
      CHECK(found);
    }
    const Zero3Stats& st = opt.zero3_stats();
    CHECK(st.gathers == (ddp > 1 ? 3 : 0));
    CHECK(st.reduce_scatters == (ddp > 1 ? 2 : 0));
  }
}

TEST_CASE("zero3 memory: the peak of a training step is below ZeRO-2's by the blocks' parameter and grad bytes "
          "that are no longer whole; at rest the allocator holds what memory() says",
          "[optim][zero3][memory]") {
  const Golden g = load_golden("vit2d");
  models::Json cfg_json = g.config;
  cfg_json["depth"] = 6;  // six blocks: gathering two at a time leaves most of them sharded
  for (auto grid_shape : meshes()) {
    const int ddp = grid_shape.first;
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    const Batch b = make_batch(g, ddp, 0);
    int64_t peak[2] = {0, 0};
    int64_t block_bytes = 0, largest_block = 0, root_bytes = 0;
    for (ShardingMode mode : {ShardingMode::ddp, ShardingMode::zero3}) {
      auto model = models::build_model("vit", cfg_json, {DType::f64, 3});
      int64_t model_bytes = 0;
      block_bytes = largest_block = root_bytes = 0;
      std::map<std::string, int64_t> per_block;
      for (const auto& [name, p] : model->named_parameters()) {
        const int64_t n = static_cast<int64_t>(p.nbytes());
        model_bytes += n;
        if (name.rfind("stages.", 0) == 0) per_block[name.substr(0, name.find('.', 7))] += n, block_bytes += n;
        else root_bytes += n;
      }
      for (const auto& [name, n] : per_block) largest_block = std::max(largest_block, n);
      const int64_t before = memory_stats(Device::cpu()).current_bytes;
      Optimizer opt(mesh, *model, recipe(mode));
      const OptimizerMemory mem = opt.memory();
      CHECK(memory_stats(Device::cpu()).current_bytes - before == mem.total() - model_bytes);
      if (mode == ShardingMode::zero3) {
        // At rest: the root unit whole (params, grads), every block as its shard (params, grads, m, v): 16/d
        // per block element for f64 AdamW is 32/d bytes.
        int64_t shards = 0, root_elems = opt.layout(0).total();
        for (size_t gi = 1; gi < opt.num_groups(); ++gi) shards += opt.layout(gi).shard_numel;
        CHECK(mem.params == 8 * (root_elems + opt.layout(0).shard_numel + shards));
        CHECK(mem.grads == 8 * (root_elems + shards));
        CHECK(mem.state == 16 * (opt.layout(0).shard_numel + shards));
      }
      const int64_t held = memory_stats(Device::cpu()).current_bytes;
      reset_peak_memory(Device::cpu());
      forward_backward(mesh, *model, b);
      opt.step();
      peak[mode == ShardingMode::zero3] = memory_stats(Device::cpu()).peak_bytes - held + (held - before);
      CHECK(memory_stats(Device::cpu()).current_bytes == held);  // nothing kept after the step
    }
    if (ddp == 1) continue;
    // ZeRO-2 holds every block's parameters and grads whole through forward and backward: 2 * block_bytes. zero3
    // holds at most two blocks' parameters and two blocks' grads whole, one reduce-scatter output, and the shards
    // of everything (master and grad: 2 * (root + blocks) / d). Activations are the same in both.
    const double d = ddp;
    const double saving = 2.0 * static_cast<double>(block_bytes) - 4.0 * static_cast<double>(largest_block) -
                          static_cast<double>(largest_block) / d -
                          2.0 * static_cast<double>(root_bytes + block_bytes) / d;
    INFO("mesh " << mesh.str() << ": peak ZeRO-2 " << peak[0] << " B, zero3 " << peak[1] << " B, block bytes "
                 << block_bytes << ", largest block " << largest_block << ", root " << root_bytes);
    REQUIRE(saving > 0);
    CHECK(static_cast<double>(peak[0] - peak[1]) >= saving);
  }
}
