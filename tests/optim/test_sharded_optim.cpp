// The optimizer on meshes: PhysicsNeMo's smoke matrix in fp64 with the bundled ViT (the golden vit2d weights; the
// batch over ddp, image rows over domain) — single rank, ddp only, domain only, 2 x 2 — every sharding mode, and
// every run's parameters after a few steps equal the single-rank run's within 1e-10; the exact collectives of one
// step per mode (ledger); the bytes per parameter the allocator measures.
#include <catch2/catch.hpp>
#include <cmath>

#include "optim/optimizer.h"
#include "runtime/allocator.h"
#include "tests/models/golden_testing.h"
#include "tests/optim/optim_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::optim;
using namespace shardrt::test;

namespace {

// Every ddp x domain split of this world size (1-D ones included), so the matrix is single rank on 1 rank, ddp 4 /
// domain 4 / 2x2 on 4.
std::vector<std::pair<int, int>> all_grids() {
  std::vector<std::pair<int, int>> out;
  const int n = world_size();
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back({n / d, d});
  return out;
}

// One training step's data: a batch of `batch` images (one per ddp rank) and a grad_output, from `seed`.
struct StepData {
  Tensor x, grad_out;
};
StepData step_data(int64_t batch, uint64_t seed) {
  return {rnd({batch, 3, 32, 24}, 1000 + seed), rnd({batch, 5}, 2000 + seed)};
}

// `steps` steps of the ViT on `mesh` with `cfg`: the model (its parameters are the result) and its optimizer.
struct Trained {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<Optimizer> opt;
};
Trained train(const Mesh& mesh, const Golden& g, OptimizerConfig cfg, int64_t batch, int steps) {
  Trained t{golden_model(g), nullptr};
  t.opt = std::make_unique<Optimizer>(mesh, *t.model, cfg);
  for (int s = 0; s < steps; ++s) {
    const StepData d = step_data(batch, static_cast<uint64_t>(s));
    const ShardTensor x = distribute(d.x, mesh, t.model->input_placements("x", d.x.shape(), mesh),
                                     t.model->input_extents("x", d.x.shape(), mesh));
    const std::vector<ShardTensor> out = t.model->forward({{"x", x}});
    backward_global(out[0], d.grad_out);
    REQUIRE(t.opt->step());
  }
  return t;
}

// The single-rank run, made on world rank 0 alone (the other ranks would only repeat it) and broadcast.
std::unique_ptr<models::Model> single_rank_run(const Golden& g, OptimizerConfig cfg, int64_t batch, int steps) {
  std::unique_ptr<models::Model> m;
  if (world_rank() == 0) {
    const Mesh serial(MPI_COMM_SELF, 1, 1);
    m = std::move(train(serial, g, cfg, batch, steps).model);
  } else {
    m = golden_model(g);
  }
  for (auto& [name, p] : m->named_parameters()) {
    Tensor c = p.contiguous().clone();
    MPI_Bcast(c.raw_data(), static_cast<int>(c.numel()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
    NoGradGuard no_grad;
    p.copy_(c);
  }
  return m;
}

double max_rel_error(const models::Model& got, const models::Model& want) {
  double err = 0, scale = 0;
  const auto a = got.named_parameters(), b = want.named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].second.to_vector(), y = b[i].second.to_vector();
    double e = 0;
    for (size_t k = 0; k < x.size(); ++k) e = std::fmax(e, std::fabs(x[k] - y[k])), scale = std::fmax(scale, std::fabs(y[k]));
    err = std::fmax(err, e);
  }
  return err / scale;
}

OptimizerConfig config(Algorithm a, ShardingMode mode) {
  OptimizerConfig c;
  c.algorithm = a;
  c.mode = mode;
  // eps 1e-6 rather than 1e-8: the key third of every qkv bias has a true grad of exactly zero (softmax ignores a
  // per-query constant), so its computed grad is rounding noise that differs between decompositions, and AdamW
  // turns noise n into an update of lr * n / (|n| + eps). With eps 1e-8 that alone reaches 2e-10 in 3 steps.
  c.adamw = {.lr = 1e-2, .eps = 1e-6, .weight_decay = 0.01};
  c.muon = {.lr = 2e-2, .weight_decay = 1e-3};
  c.sgd = {.lr = 0.05, .momentum = 0.9, .nesterov = true};
  if (a != Algorithm::adamw) c.max_grad_norm = 0.5;  // clipping active (the ViT's grad norm is larger)
  c.schedule = warmup_cosine_schedule(1, 4, 0.1, 0.1);
  return c;
}

}  // namespace

TEST_CASE("smoke matrix: ViT in fp64, every mesh and sharding mode, parameters after 3 steps equal the single-rank "
          "run's within 1e-10",
          "[optim][sharded][smoke]") {
  const Golden g = load_golden("vit2d");
  const auto initial = golden_model(g);
  // AdamW in every mode; Muon where whole-matrix ownership matters (the sharded modes); SGD once.
  const std::vector<std::pair<Algorithm, std::vector<ShardingMode>>> runs = {
      {Algorithm::adamw, {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh}},
      {Algorithm::muon_adamw, {ShardingMode::ddp, ShardingMode::mesh}},
      {Algorithm::sgd, {ShardingMode::mesh}}};
  for (auto grid_shape : all_grids()) {
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    const int64_t batch = grid_shape.first;  // one sample per domain group
    for (const auto& [a, modes] : runs) {
      const auto want = single_rank_run(g, config(a, ShardingMode::replicated), batch, 3);
      REQUIRE(max_rel_error(*want, *initial) > 1e-4);  // the steps moved the parameters
      for (ShardingMode mode : modes) {
        const Trained got = train(mesh, g, config(a, mode), batch, 3);
        const Optimizer* opt = got.opt.get();
        INFO("mesh " << mesh.str() << " mode " << sharding_mode_name(mode) << " " << algorithm_name(a));
        const ArenaLayout& L = opt->layout(0);
        CHECK(L.shards == opt->plan().shards);
        if (opt->plan().shards > 1) CHECK(L.shard_numel < L.total());  // sharding is active
        CHECK(max_rel_error(*got.model, *want) <= 1e-10);
      }
    }
  }
}

TEST_CASE("ledger: the exact collectives of one optimizer step in each mode", "[optim][sharded][ledger]") {
  const Golden g = load_golden("vit2d");
  for (auto grid_shape : all_grids()) {
    const auto [ddp, dom] = grid_shape;
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    for (ShardingMode mode : {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh}) {
      OptimizerConfig cfg = config(Algorithm::adamw, mode);
      cfg.max_grad_norm = 1.0;
      auto model = golden_model(g);
      Optimizer opt(mesh, *model, cfg);
      const StepData d = step_data(ddp, 0);
      const ShardTensor x = distribute(d.x, mesh, model->input_placements("x", d.x.shape(), mesh),
                                       model->input_extents("x", d.x.shape(), mesh));
      backward_global(model->forward({{"x", x}})[0], d.grad_out);
      mesh.flat().ledger().reset();
      opt.step();
      const ArenaLayout& L = opt.layout(0);
      const int64_t total = L.total(), shard = L.shard_numel, P = mesh.size();
      const std::string flat = mesh.flat().axis();
      std::vector<ExpectedComm> want;
      switch (mode) {
        case ShardingMode::replicated:
          // The mean over ddp of the whole grad arena; every rank then holds every grad: no norm collective.
          if (ddp > 1) want.push_back({"optimizer.reduce_grads", "all_reduce", "ddp", 1, all_reduce_bytes(total, 8, ddp)});
          break;
        case ShardingMode::ddp:
          if (ddp > 1) {
            want.push_back({"optimizer.reduce_grads", "reduce_scatter", "ddp", 1, (total - shard) * 8});
            want.push_back({"optimizer.clip", "all_reduce", "ddp", 1, all_reduce_bytes(1, 8, ddp)});
            want.push_back({"optimizer.gather_params", "all_gather", "ddp", 1, shard * 8 * (ddp - 1)});
          }
          break;
        case ShardingMode::mesh:
          if (ddp > 1) want.push_back({"optimizer.reduce_grads", "reduce_scatter", "ddp", 1, (total - total / ddp) * 8});
          if (P > 1) {
            want.push_back({"optimizer.clip", "all_reduce", flat, 1, all_reduce_bytes(1, 8, static_cast<int>(P))});
            want.push_back({"optimizer.gather_params", "all_gather", flat, 1, shard * 8 * (P - 1)});
          }
          break;
        case ShardingMode::zero3:  // tests/optim/test_zero3.cpp (its collectives run during forward and backward)
          break;
      }
      INFO("mesh " << mesh.str() << " mode " << sharding_mode_name(mode));
      check_ledger(mesh, want);
    }
  }
}

TEST_CASE("bytes per parameter: the allocator's count equals the arenas' accounting (f32 AdamW: 16; ddp 8 + 8/d; "
          "mesh 8 + 8/P)",
          "[optim][sharded][memory]") {
  const Golden g = load_golden("vit2d");
  for (auto grid_shape : all_grids()) {
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    for (ShardingMode mode : {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh}) {
      auto model = models::build_model("vit", g.config, {DType::f32});
      int64_t model_bytes = 0;
      for (const Tensor& p : model->parameters()) model_bytes += static_cast<int64_t>(p.nbytes());
      const int64_t before = memory_stats(Device::cpu()).current_bytes;
      OptimizerMemory mem;
      {
        OptimizerConfig cfg = config(Algorithm::adamw, mode);
        Optimizer opt(mesh, *model, cfg);
        const int64_t after = memory_stats(Device::cpu()).current_bytes;
        mem = opt.memory();
        // The model's own parameter storage was given up for the arenas.
        CHECK(after - before == mem.total() - model_bytes);
        const ArenaLayout& L = opt.layout(0);
        CHECK(mem.params == 4 * L.total());
        CHECK(mem.grads == 4 * L.total());
        CHECK(mem.state == 8 * L.shard_numel);
        const double d = opt.plan().shards;
        // Padding only: within a shard's worth of elements of a + b/d.
        const double pad = static_cast<double>(L.total() - mem.num_parameters) / static_cast<double>(mem.num_parameters);
        CHECK(std::fabs(mem.bytes_per_parameter() - (8 + 8 / d)) <= 16 * pad + 1e-12);
        INFO("mode " << sharding_mode_name(mode) << " " << mesh.str() << ": " << mem.bytes_per_parameter());
        if (mode == ShardingMode::ddp) CHECK(d == grid_shape.first);
        if (mode == ShardingMode::mesh) CHECK(d == mesh.size());
        // A step's transient: the reduce_scatter output (1/ddp of the grads in `mesh` mode, whose own 1/domain of
        // it is kept; 1/d in `ddp`) and the all_gather's send buffer (1/d); never a whole-arena temporary. The
        // slack covers the one-element norm and checked mode's signature buffers.
        opt.grad_arena(0).buffer().fill_(1e-3);
        reset_peak_memory(Device::cpu());
        const int64_t held = memory_stats(Device::cpu()).current_bytes;
        opt.step();
        const int64_t transient = memory_stats(Device::cpu()).peak_bytes - held;
        const int64_t shard_bytes = 4 * L.shard_numel, slack = 4096;
        const int ddp = grid_shape.first, dom = grid_shape.second;
        int64_t bound = slack;
        if (mode == ShardingMode::ddp && ddp > 1) bound += 2 * shard_bytes;
        if (mode == ShardingMode::mesh && mesh.size() > 1) bound += (ddp > 1 ? dom : 0) * shard_bytes + shard_bytes;
        CHECK(transient <= bound);
        CHECK(memory_stats(Device::cpu()).current_bytes == held);  // nothing kept after the step
      }
    }
  }
}

TEST_CASE("mixed precision on every mode: bf16 grads reduced with f32 accumulation, f32 master shards; the sharded "
          "modes give the replicated mode's bits",
          "[optim][sharded][precision]") {
  for (auto grid_shape : all_grids()) {
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    std::vector<std::vector<double>> result[3];
    for (ShardingMode mode : {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh}) {
      ToyParams m(DType::bf16);
      OptimizerConfig cfg;
      cfg.mode = mode;
      cfg.algorithm = Algorithm::muon_adamw;
      cfg.max_grad_norm = 1.0;
      Optimizer opt(mesh, m, cfg);
      CHECK(opt.memory().master == 4 * opt.layout(0).shard_numel);  // the master is this rank's shard only
      for (int t = 0; t < 2; ++t) {
        // Each ddp rank its own grads (the same on the ranks of a domain group, as the patches leave them).
        set_grads(m, 600 + 10 * t + static_cast<uint64_t>(mesh.coord("ddp")));
        opt.step();
      }
      result[static_cast<int>(mode)] = values(m);
    }
    INFO("mesh " << mesh.str());
    CHECK(result[1] == result[0]);
    CHECK(result[2] == result[0]);
    // On one ddp rank the replicated run is the single-rank closed form of test_optimizer; here: it moved.
    CHECK(result[0] != values(ToyParams(DType::bf16)));
  }
}

namespace {
// Six elements: a scalar, a 2 x 2 Muon matrix, a scalar. On 4 shards the matrix fixes the shard at 4 elements, so
// the last shards hold only padding: ranks that own nothing must still take part and leave the padding at zero.
struct Tiny : models::Module {
  Tiny() {
    a = from_vector({0.5}, {1}, {DType::f64});
    w = from_vector({1.0, -2.0, 0.25, 3.0}, {2, 2}, {DType::f64});
    c = from_vector({-1.5}, {1}, {DType::f64});
    register_parameter("a", &a);
    register_parameter("w", &w);
    register_parameter("c", &c);
  }
  Tensor a, w, c;
};
}  // namespace

TEST_CASE("shards of padding only: ranks that own no parameter step in lockstep, the result is the replicated one's",
          "[optim][sharded]") {
  for (auto grid_shape : all_grids()) {
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    std::vector<std::vector<double>> result[3];
    for (ShardingMode mode : {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh}) {
      Tiny m;
      OptimizerConfig cfg;
      cfg.mode = mode;
      cfg.algorithm = Algorithm::muon_adamw;
      cfg.max_grad_norm = 2.0;
      Optimizer opt(mesh, m, cfg);
      const ArenaLayout& L = opt.layout(0);
      if (opt.plan().shards == 4) {
        CHECK(L.shard_numel == 4);
        CHECK(L.slots[1].offset == 4);  // the matrix starts shard 1; shards 2 and 3 are padding
      }
      for (int t = 0; t < 3; ++t) {
        set_grads(m, 700 + 10 * t + static_cast<uint64_t>(mesh.coord("ddp")));
        opt.step();
      }
      const std::vector<double> arena = opt.param_arena(0).buffer().to_vector();
      for (size_t k = 0; k < arena.size(); ++k) {
        bool in_slot = false;
        for (const ArenaSlot& s : L.slots) in_slot = in_slot || (static_cast<int64_t>(k) >= s.offset && static_cast<int64_t>(k) < s.offset + s.numel);
        if (!in_slot) CHECK(arena[k] == 0.0);
      }
      result[static_cast<int>(mode)] = values(m);
    }
    INFO("mesh " << mesh.str());
    CHECK(result[1] == result[0]);
    CHECK(result[2] == result[0]);
  }
}

TEST_CASE("ranks with different parameter sets: a ValueError on every rank at construction, the module untouched",
          "[optim][sharded][errors]") {
  if (world_size() == 1) return;
  const Mesh mesh = grid({world_size(), 1}, std::make_shared<CommLedger>());
  std::unique_ptr<models::Module> m;
  if (world_rank() == 0) m = std::make_unique<Tiny>();
  else m = std::make_unique<ToyParams>();
  const auto before = values(*m);
  CHECK_THROWS_WITH(Optimizer(mesh, *m, OptimizerConfig{}), Catch::Contains("different parameter sets") &&
                                                                 Catch::Contains("same model"));
  CHECK(values(*m) == before);
  CHECK(grad_of(m->named_parameters()[0].second).defined() == false);
}
