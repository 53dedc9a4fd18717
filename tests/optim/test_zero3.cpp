// The zero3 mode (FSDP2 / ZeRO-3, optim/zero3.cpp): the ViT and FLARE in fp64 on every mesh of this world size give
// the single-rank run's parameters within 1e-10; the ledger of one training step (per-block all_gathers in forward
// and backward, per-block reduce_scatters, the root unit's step collectives); the allocator's peak of a step below
// the ZeRO-2 (`ddp`) mode's by what the parameter bytes say; the block hooks' bookkeeping.
#include <mpi.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

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

// The unit of each arena group, in the optimizer's order (groups by unit, in order of first appearance in
// named_parameters(); one dtype here): a block's name, or "" for the root unit.
std::vector<std::string> group_units(const models::Module& model, const std::vector<std::string>& blocks) {
  std::vector<std::string> out;
  for (const auto& [name, p] : model.named_parameters()) {
    std::string unit;
    for (const std::string& b : blocks)
      if (name.rfind(b + ".", 0) == 0) unit = b;
    if (std::find(out.begin(), out.end(), unit) == out.end()) out.push_back(unit);
  }
  return out;
}

// The ledger of one training step of the golden's model on every mesh, computed from the block list and the arena
// layout: each block's all_gather in forward (the first as it starts, the others prefetched), again in backward
// for every block but the last (kept from its forward), one reduce_scatter per block, then the root unit's
// reduce_scatter, the clipping all_reduce and its all_gather.
void check_step_ledger(const std::string& golden, size_t expected_blocks) {
  const Golden g = load_golden(golden);
  for (auto grid_shape : meshes()) {
    const int ddp = grid_shape.first;
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    auto model = golden_model(g);
    OptimizerConfig cfg = recipe(ShardingMode::zero3);
    cfg.max_grad_norm = 1.0;
    Optimizer opt(mesh, *model, cfg);
    const std::vector<std::string> blocks = opt.zero3_block_names();
    REQUIRE(blocks.size() == expected_blocks);
    const std::vector<std::string> units = group_units(*model, blocks);
    REQUIRE(opt.num_groups() == blocks.size() + 1);
    REQUIRE(units.size() == opt.num_groups());
    int64_t root_total = 0, root_shard = 0, shards = 0, shards_but_last = 0, totals = 0;
    for (size_t gi = 0; gi < units.size(); ++gi) {
      const ArenaLayout& l = opt.layout(gi);
      if (units[gi].empty()) {
        root_total = l.total(), root_shard = l.shard_numel;
        continue;
      }
      shards += l.shard_numel, totals += l.total();
      if (units[gi] != blocks.back()) shards_but_last += l.shard_numel;
    }
    REQUIRE(root_total > 0);
    const Batch b = make_batch(g, ddp, 0);
    mesh.flat().ledger().reset();
    forward_backward(mesh, *model, b);
    opt.step();
    const int64_t k = static_cast<int64_t>(blocks.size());
    std::vector<ExpectedComm> want;
    if (ddp > 1) {
      want.push_back({"zero3.gather_forward", "all_gather", "ddp", k, shards * 8 * (ddp - 1)});
      want.push_back({"zero3.gather_backward", "all_gather", "ddp", k - 1, shards_but_last * 8 * (ddp - 1)});
      want.push_back({"zero3.reduce_grads", "reduce_scatter", "ddp", k, (totals - shards) * 8});
      want.push_back({"optimizer.reduce_grads", "reduce_scatter", "ddp", 1, (root_total - root_shard) * 8});
      want.push_back({"optimizer.clip", "all_reduce", "ddp", 1, all_reduce_bytes(1, 8, ddp)});
      want.push_back({"optimizer.gather_params", "all_gather", "ddp", 1, root_shard * 8 * (ddp - 1)});
    }
    // Every optimizer / zero3 line is one of these (the model's own collectives, under its ops' scopes, are the
    // models suite's business).
    std::vector<LedgerEntry> got;
    for (const LedgerEntry& e : mesh.flat().ledger().entries())
      if (e.calls > 0 && (e.scope.rfind("zero3", 0) == 0 || e.scope.rfind("optimizer", 0) == 0)) got.push_back(e);
    INFO(golden << " on mesh " << mesh.str() << ", rank " << world_rank() << " ledger:\n"
                << mesh.flat().ledger().table());
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
    CHECK(st.gathers == (ddp > 1 ? 2 * k - 1 : 0));
    CHECK(st.reduce_scatters == (ddp > 1 ? k : 0));
  }
}

// A step's allocator peak in zero3 against ZeRO-2 (`ddp`) on every mesh of this world size, for the model `kind`
// built from `config`. ZeRO-2 holds every block's parameters and grads whole through forward and backward:
// 2 * B. zero3 holds at most two blocks' parameters and two blocks' grads whole, one reduce-scatter output, and
// the shards of everything (master and grad: 2 * (R + B) / d). Activations are the same in both. At rest the
// allocator holds what memory() says.
void check_peak_saving(const std::string& kind, const models::Json& config, const Golden& g) {
  for (auto grid_shape : meshes()) {
    const int ddp = grid_shape.first;
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    const Batch b = make_batch(g, ddp, 0);
    int64_t peak[2] = {0, 0};
    int64_t block_bytes = 0, largest_block = 0, root_bytes = 0;
    for (ShardingMode mode : {ShardingMode::ddp, ShardingMode::zero3}) {
      auto model = models::build_model(kind, config, {DType::f64, 3});
      int64_t model_bytes = 0;
      for (const auto& [name, p] : model->named_parameters()) model_bytes += static_cast<int64_t>(p.nbytes());
      const int64_t before = memory_stats(Device::cpu()).current_bytes;
      Optimizer opt(mesh, *model, recipe(mode));
      const OptimizerMemory mem = opt.memory();
      CHECK(memory_stats(Device::cpu()).current_bytes - before == mem.total() - model_bytes);
      if (mode == ShardingMode::zero3) {
        const std::vector<std::string> blocks = opt.zero3_block_names();
        std::map<std::string, int64_t> per_block;
        for (const auto& [name, p] : model->named_parameters()) {
          std::string unit;
          for (const std::string& blk : blocks)
            if (name.rfind(blk + ".", 0) == 0) unit = blk;
          const int64_t n = static_cast<int64_t>(p.nbytes());
          if (unit.empty()) root_bytes += n;
          else per_block[unit] += n, block_bytes += n;
        }
        for (const auto& [name, n] : per_block) largest_block = std::max(largest_block, n);
        // At rest: the root unit whole (params, grads), every block as its shard (params, grads, m, v): 16/d
        // per block element for f64 AdamW is 32/d bytes.
        const std::vector<std::string> units = group_units(*model, blocks);
        REQUIRE(units.size() == opt.num_groups());
        int64_t shards = 0, root_elems = 0, root_shard = 0;
        for (size_t gi = 0; gi < opt.num_groups(); ++gi)
          if (units[gi].empty()) root_elems = opt.layout(gi).total(), root_shard = opt.layout(gi).shard_numel;
          else shards += opt.layout(gi).shard_numel;
        CHECK(mem.params == 8 * (root_elems + root_shard + shards));
        CHECK(mem.grads == 8 * (root_elems + shards));
        CHECK(mem.state == 16 * (root_shard + shards));
      }
      const int64_t held = memory_stats(Device::cpu()).current_bytes;
      reset_peak_memory(Device::cpu());
      forward_backward(mesh, *model, b);
      opt.step();
      peak[mode == ShardingMode::zero3] = memory_stats(Device::cpu()).peak_bytes - held + (held - before);
      CHECK(memory_stats(Device::cpu()).current_bytes == held);  // nothing kept after the step
    }
    if (ddp == 1) continue;
    const double d = ddp;
    const double saving = 2.0 * static_cast<double>(block_bytes) - 4.0 * static_cast<double>(largest_block) -
                          static_cast<double>(largest_block) / d -
                          2.0 * static_cast<double>(root_bytes + block_bytes) / d;
    INFO(kind << " on mesh " << mesh.str() << ": peak ZeRO-2 " << peak[0] << " B, zero3 " << peak[1]
              << " B, block bytes " << block_bytes << ", largest block " << largest_block << ", root " << root_bytes);
    REQUIRE(saving > 0);
    CHECK(static_cast<double>(peak[0] - peak[1]) >= saving);
  }
}

}  // namespace

// One golden model trained 3 steps under zero3 on every mesh: its parameters equal the single-rank replicated
// run's within 1e-10, and the steps moved them.
static void check_zero3_matches_single_rank(const std::string& golden, Algorithm algorithm) {
  const Golden g = load_golden(golden);
  for (auto grid_shape : meshes()) {
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    const int64_t batch = grid_shape.first;
    const auto want = single_rank(g, recipe(ShardingMode::replicated, algorithm), batch, 3);
    const auto got = trained(mesh, g, recipe(ShardingMode::zero3, algorithm), batch, 3);
    std::vector<std::vector<double>> initial;
    for (const auto& [name, p] : golden_model(g)->named_parameters()) initial.push_back(p.to_vector());
    INFO(golden << " " << algorithm_name(algorithm) << " on " << mesh.str());
    CHECK(max_rel(want, initial) > 1e-4);  // the steps moved the parameters
    CHECK(max_rel(got, want) <= 1e-10);
  }
}

TEST_CASE("zero3: ViT and FLARE in fp64 on every mesh, parameters after 3 steps equal the single-rank run's within "
          "1e-10",
          "[optim][zero3]") {
  struct Run {
    std::string golden;
    Algorithm algorithm;
  };
  // Muon + AdamW on the ViT: whole matrices inside each block's own shards, and clipping across the blocks' shards.
  for (const Run& run : {Run{"vit2d", Algorithm::muon_adamw}, Run{"flare_irregular", Algorithm::adamw}}) {
    check_zero3_matches_single_rank(run.golden, run.algorithm);
  }
}

TEST_CASE("zero3: GeoTransolver in fp64 on every mesh (AdamW; Muon + AdamW with clipping; local features), "
          "parameters after 3 steps equal the single-rank run's within 1e-10",
          "[optim][zero3][geotransolver]") {
  struct Run {
    std::string golden;
    Algorithm algorithm;
  };
  // gale_weighted: the context from geometry (sharded over the domain, its slice sums all-reduced there) and
  // global tokens, read by both GALE blocks; local: the ball-query features, built inside the context builder's
  // unit and concatenated with the preprocess unit's output outside both.
  for (const Run& run : {Run{"geotransolver_gale_weighted", Algorithm::adamw},
                         Run{"geotransolver_gale_weighted", Algorithm::muon_adamw},
                         Run{"geotransolver_local", Algorithm::adamw}}) {
    check_zero3_matches_single_rank(run.golden, run.algorithm);
  }
}

TEST_CASE("zero3: GeoTransolver's units are its context builder, preprocess Mlps and GALE blocks; ln_mlp_out stays "
          "in the root unit; a block list naming a module that opens no scope fails with the released error",
          "[optim][zero3][geotransolver]") {
  const Golden g = load_golden("geotransolver_local");
  const Mesh mesh = grid(meshes().front(), std::make_shared<CommLedger>());
  auto model = golden_model(g);
  Optimizer opt(mesh, *model, recipe(ShardingMode::zero3));
  const std::vector<std::string> blocks = {"context_builder", "preprocess.0", "blocks.0", "blocks.1"};
  CHECK(opt.zero3_block_names() == blocks);
  for (const auto& [name, p] : model->named_parameters()) {
    const bool root = name.rfind("ln_mlp_out.", 0) == 0;
    INFO(name);
    CHECK(p.storage()->resident() == root);
  }
  forward_backward(mesh, *model, make_batch(g, meshes().front().first, 0));
  opt.step();
  for (const auto& [name, p] : model->named_parameters())
    if (name.rfind("ln_mlp_out.", 0) != 0) CHECK_FALSE(p.storage()->resident());
  // A unit inside the context builder's forward that opens no scope of its own: its parameters are never gathered,
  // and the first read is the typed error.
  OptimizerConfig bad = recipe(ShardingMode::zero3);
  bad.zero3_blocks = {"context_builder.geometry_tokenizer", "blocks.0", "blocks.1"};
  auto other = golden_model(g);
  Optimizer bad_opt(mesh, *other, bad);
  CHECK_THROWS_WITH(forward_backward(mesh, *other, make_batch(g, meshes().front().first, 0)),
                    Catch::Contains("released"));
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
  // The ViT's two stages (the root unit: pos_embed, patch_embed, head); GeoTransolver's context builder, its
  // preprocess Mlp and two GALE blocks (the root unit: ln_mlp_out).
  check_step_ledger("vit2d", 2);
  check_step_ledger("geotransolver_gale_weighted", 4);
}

TEST_CASE("zero3 memory: the peak of a training step is below ZeRO-2's by the blocks' parameter and grad bytes "
          "that are no longer whole; at rest the allocator holds what memory() says",
          "[optim][zero3][memory]") {
  // Six blocks each: gathering two at a time leaves most of them sharded.
  const Golden vit = load_golden("vit2d");
  models::Json vit_cfg = vit.config;
  vit_cfg["depth"] = 6;
  check_peak_saving("vit", vit_cfg, vit);
  const Golden geo = load_golden("geotransolver_gale_weighted");
  models::Json geo_cfg = geo.config;
  geo_cfg["n_layers"] = 6;
  check_peak_saving("geotransolver", geo_cfg, geo);
}
