// Deferred domain sums of parameter grads (optim/grad_buckets.h): the patches leave parameter grads partial over
// the domain axis and the optimizer sums them in buckets during backward. The smoke matrix in fp64 for the ViT and
// FLARE goldens (single rank, ddp 4, domain 4, 2 x 2; every sharding mode) against the plain single-rank run within
// 1e-10; the exact bucket collectives of one step; the bucket plan; accumulation windows and misuse.
#include <catch2/catch.hpp>
#include <cmath>

#include "autograd/ops.h"
#include "optim/optimizer.h"
#include "tests/models/golden_testing.h"
#include "tests/optim/optim_testing.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::optim;
using namespace shardrt::test;

namespace {

std::vector<std::pair<int, int>> every_grid() {
  std::vector<std::pair<int, int>> out;
  for (int d = 1; d <= world_size(); ++d)
    if (world_size() % d == 0) out.push_back({world_size() / d, d});
  return out;
}

// A golden model and the shapes of one step's inputs and grad_output (dim 0: the batch, one sample per domain group).
struct ModelCase {
  std::string golden;
  std::vector<std::pair<std::string, Shape>> inputs;  // per-sample shapes, the batch dim left out
  Shape grad_out;
};
const std::vector<ModelCase>& model_cases() {
  static const std::vector<ModelCase> cases = {
      {"vit2d", {{"x", {3, 32, 24}}}, {5}},
      {"flare_irregular", {{"fx", {37, 3}}, {"embedding", {37, 5}}}, {37, 2}},
  };
  return cases;
}

Shape batched(int64_t batch, Shape s) {
  s.insert(s.begin(), batch);
  return s;
}

// One micro-batch: forward on `mesh` and backward of <out, grad_out>, from `seed`; deferred when `opt` is given.
void forward_backward(const Mesh& mesh, models::Model& model, const ModelCase& mc, int64_t batch, uint64_t seed,
                      Optimizer* deferring) {
  std::shared_ptr<DeferredDomainSums> deferred;
  if (deferring) deferred = deferring->defer_domain_grad_sums();
  std::map<std::string, ShardTensor> named;
  uint64_t k = 0;
  for (const auto& [name, shape] : mc.inputs) {
    const Tensor full = rnd(batched(batch, shape), 1000 + 10 * seed + k++);
    // Empty extents: the even split (what a model says when it has no layout of its own).
    const Placements placements = model.input_placements(name, full.shape(), mesh);
    const AxisExtents extents = model.input_extents(name, full.shape(), mesh);
    named[name] = extents.empty() ? distribute(full, mesh, placements) : distribute(full, mesh, placements, extents);
  }
  const std::vector<ShardTensor> out = model.forward(named);
  backward_global(out[0], rnd(batched(batch, mc.grad_out), 2000 + seed));
}

OptimizerConfig config(ShardingMode mode, int64_t bucket_bytes) {
  OptimizerConfig c;
  c.algorithm = Algorithm::adamw;
  c.mode = mode;
  // eps 1e-6 as in test_sharded_optim: grads that are exactly zero in exact arithmetic are rounding noise that
  // differs between decompositions, and a smaller eps amplifies it.
  c.adamw = {.lr = 1e-2, .eps = 1e-6, .weight_decay = 0.01};
  c.max_grad_norm = 0.5;
  c.schedule = warmup_cosine_schedule(1, 4, 0.1, 0.1);
  c.bucket_bytes = bucket_bytes;
  return c;
}

struct Trained {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<Optimizer> opt;
};
Trained train(const Mesh& mesh, const ModelCase& mc, OptimizerConfig cfg, int64_t batch, int steps, bool deferred) {
  Trained t{golden_model(load_golden(mc.golden)), nullptr};
  t.opt = std::make_unique<Optimizer>(mesh, *t.model, cfg);
  for (int s = 0; s < steps; ++s) {
    forward_backward(mesh, *t.model, mc, batch, static_cast<uint64_t>(s), deferred ? t.opt.get() : nullptr);
    REQUIRE(t.opt->step());
  }
  return t;
}

// The plain single-rank run on world rank 0, broadcast.
std::vector<std::vector<double>> single_rank_values(const ModelCase& mc, OptimizerConfig cfg, int64_t batch, int steps) {
  std::vector<std::vector<double>> v;
  if (world_rank() == 0) {
    const Mesh serial(MPI_COMM_SELF, 1, 1);
    v = values(*train(serial, mc, cfg, batch, steps, false).model);
  } else {
    v = values(*golden_model(load_golden(mc.golden)));
  }
  for (auto& x : v) MPI_Bcast(x.data(), static_cast<int>(x.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return v;
}

double max_rel_error(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::fmax(err, max_abs_diff(got[i], want[i]));
    for (double y : want[i]) scale = std::fmax(scale, std::fabs(y));
  }
  return err / scale;
}

// The test's own bucket rule (independent of plan_grad_buckets): slots from the last, closed at >= `bytes`.
std::vector<int64_t> expected_bucket_numels(const ArenaLayout& L, int64_t bytes, int64_t itemsize) {
  std::vector<int64_t> numels;
  int64_t held = 0, lo = 0, hi = 0;
  bool open = false;
  for (int k = static_cast<int>(L.slots.size()) - 1; k >= 0; --k) {
    const ArenaSlot& s = L.slots[static_cast<size_t>(k)];
    if (!open) hi = s.offset + s.numel, open = true;
    lo = s.offset;
    held += s.numel * itemsize;
    if (held >= bytes) numels.push_back(hi - lo), held = 0, open = false;
  }
  if (open) numels.push_back(hi - lo);
  return numels;
}

}  // namespace

TEST_CASE("deferred buckets: ViT and FLARE in fp64, every mesh and sharding mode, parameters after 2 steps equal the "
          "plain single-rank run's within 1e-10",
          "[optim][deferred][smoke]") {
  const int steps = 2;
  for (const ModelCase& mc : model_cases()) {
    for (auto grid_shape : every_grid()) {
      const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
      const int64_t batch = grid_shape.first;
      // 4 KiB buckets: many of them, so buckets start throughout backward; the modes differ only in the ddp step.
      const auto want = single_rank_values(mc, config(ShardingMode::replicated, 4096), batch, steps);
      for (ShardingMode mode : {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh}) {
        const Trained got = train(mesh, mc, config(mode, 4096), batch, steps, /*deferred=*/true);
        INFO(mc.golden << " on " << mesh.str() << " mode " << sharding_mode_name(mode));
        CHECK(max_rel_error(values(*got.model), want) <= 1e-10);
        CHECK(max_rel_error(values(*got.model), values(*golden_model(load_golden(mc.golden)))) > 1e-4);  // it moved
      }
    }
  }
}

TEST_CASE("deferred buckets: one step's collectives — one all_reduce per bucket (count from the bucket size and the "
          "parameter bytes; over domain, or over the whole mesh in replicated mode, which then drops its ddp "
          "all_reduce), fewer in the patches' backward, everything else unchanged",
          "[optim][deferred][ledger]") {
  const ModelCase& mc = model_cases()[0];
  for (auto grid_shape : every_grid()) {
    const auto [ddp, dom] = grid_shape;
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    for (ShardingMode mode : {ShardingMode::ddp, ShardingMode::replicated})
      for (int64_t bucket_bytes : {int64_t{4096}, int64_t{1} << 20}) {
        if (mode == ShardingMode::replicated && bucket_bytes != 4096) continue;  // one size shows the fold
        std::map<std::string, LedgerEntry> plain, deferred;
        for (bool defer : {false, true}) {
          auto model = golden_model(load_golden(mc.golden));
          Optimizer opt(mesh, *model, config(mode, bucket_bytes));
          mesh.flat().ledger().reset();
          forward_backward(mesh, *model, mc, ddp, 0, defer ? &opt : nullptr);
          opt.step();
          for (const LedgerEntry& e : mesh.flat().ledger().entries())
            if (e.calls > 0) (defer ? deferred : plain)[e.scope + " " + e.kind + " " + e.axis] = e;
        }
        auto model = golden_model(load_golden(mc.golden));
        const Optimizer probe(mesh, *model, config(mode, bucket_bytes));
        const std::vector<int64_t> numels = expected_bucket_numels(probe.layout(0), bucket_bytes, 8);
        const bool whole_mesh = mode == ShardingMode::replicated;
        const int over = whole_mesh ? ddp * dom : dom;
        const std::string axis = whole_mesh ? mesh.flat().axis() : mesh.axis_names().back();
        const std::string bucket_key = "optimizer.grad_buckets all_reduce " + axis;
        // In replicated mode the buckets made the ddp sum: the step's own all_reduce is gone.
        const std::string dropped = "optimizer.reduce_grads all_reduce " + mesh.axis_names().front();
        INFO("mesh " << mesh.str() << " " << sharding_mode_name(mode) << " bucket_bytes " << bucket_bytes << ": "
                     << numels.size() << " buckets");
        if (bucket_bytes == 4096) CHECK(numels.size() >= 5);  // many buckets, spread over the backward
        if (bucket_bytes == (int64_t{1} << 20)) CHECK(numels.size() == 1);  // the tiny ViT's grads fit in one MiB
        if (over > 1) {
          int64_t bytes = 0;
          for (int64_t n : numels) bytes += all_reduce_bytes(n, 8, over);
          REQUIRE(deferred.count(bucket_key) == 1);
          CHECK(deferred.at(bucket_key).calls == static_cast<int64_t>(numels.size()));
          CHECK(deferred.at(bucket_key).bytes_sent == bytes);
        } else {
          CHECK(deferred.count(bucket_key) == 0);  // one rank to sum over: nothing is issued
        }
        if (whole_mesh && ddp > 1) {
          CHECK(plain.count(dropped) == 1);
          CHECK(deferred.count(dropped) == 0);
        }
        // Everything else: forward and optimizer lines identical; backward lines never more, in total fewer calls.
        int64_t backward_plain = 0, backward_deferred = 0;
        for (const auto& [key, e] : plain) {
          if (whole_mesh && key == dropped) continue;
          const bool backward_line = e.scope.size() > 9 && e.scope.compare(e.scope.size() - 9, 9, ".backward") == 0;
          const LedgerEntry* d = deferred.count(key) ? &deferred.at(key) : nullptr;
          INFO(key);
          if (backward_line) {
            backward_plain += e.calls;
            backward_deferred += d ? d->calls : 0;
            if (d) CHECK(d->bytes_sent <= e.bytes_sent);
          } else {
            REQUIRE(d);
            CHECK(d->calls == e.calls);
            CHECK(d->bytes_sent == e.bytes_sent);
          }
        }
        for (const auto& [key, e] : deferred) {
          INFO(key);
          CHECK((plain.count(key) == 1 || key == bucket_key));
        }
        // (One domain rank: the patches' skipped sums were 1-rank calls of no bytes, still counted as calls.)
        if (dom > 1) CHECK(backward_deferred < backward_plain);
        else CHECK(backward_deferred <= backward_plain);
      }
  }
}

TEST_CASE("deferred buckets: the plan covers every slot once, last slots first, closed at the size", "[optim][deferred]") {
  ToyParams m;  // w 3x5, b 5, v 4x2, s 1: 29 elements
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  Optimizer opt(serial, m, OptimizerConfig{});
  const ArenaLayout& L = opt.layout(0);
  // 8-byte elements, 64-byte buckets: s + v (9 elements) closes the first, b + w (20) the second.
  const std::vector<GradBucket> b = plan_grad_buckets(L, 0, 64, 8);
  REQUIRE(b.size() == 2);
  CHECK(b[0].slots == std::vector<size_t>{3, 2});
  CHECK(b[1].slots == std::vector<size_t>{1, 0});
  CHECK(b[0].begin == L.slots[2].offset);
  CHECK(b[0].end == L.slots[3].offset + 1);
  CHECK(b[1].begin == 0);
  CHECK(b[1].end == L.slots[1].offset + 5);
  // One byte: a bucket per slot; a huge size: one bucket.
  CHECK(plan_grad_buckets(L, 0, 1, 8).size() == 4);
  CHECK(plan_grad_buckets(L, 0, int64_t{1} << 40, 8).size() == 1);
  CHECK_THROWS_WITH(plan_grad_buckets(L, 0, 0, 8), Catch::Contains("bucket_bytes 0"));
}

TEST_CASE("deferred buckets: an accumulation window sums once at its last micro-batch; mixing deferred and plain "
          "micro-batches, or a second backward into a started bucket, is a ValueError",
          "[optim][deferred][accumulation]") {
  const ModelCase& mc = model_cases()[0];
  for (auto grid_shape : every_grid()) {
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    const int64_t batch = grid_shape.first;
    OptimizerConfig cfg = config(ShardingMode::mesh, 4096);
    cfg.accumulation_steps = 2;
    std::vector<std::vector<double>> result[2];
    for (bool defer : {false, true}) {
      auto model = golden_model(load_golden(mc.golden));
      Optimizer opt(mesh, *model, cfg);
      for (int micro = 0; micro < 4; ++micro) {
        forward_backward(mesh, *model, mc, batch, static_cast<uint64_t>(micro), defer ? &opt : nullptr);
        CHECK(opt.step() == (micro % 2 == 1));
      }
      result[defer] = values(*model);
    }
    INFO("mesh " << mesh.str());
    CHECK(max_rel_error(result[1], result[0]) <= 1e-12);

    auto model = golden_model(load_golden(mc.golden));
    Optimizer opt(mesh, *model, cfg);
    forward_backward(mesh, *model, mc, batch, 0, &opt);
    opt.step();
    forward_backward(mesh, *model, mc, batch, 1, nullptr);
    CHECK_THROWS_WITH(opt.step(), Catch::Contains("1 of the 2 micro-batches") && Catch::Contains("defer all of them"));
  }
  // A second backward after the first one's buckets started (a single rank: every bucket starts, nothing to sum).
  ToyParams m;
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  OptimizerConfig one_per_slot;
  one_per_slot.bucket_bytes = 1;
  Optimizer opt(serial, m, one_per_slot);
  auto scope = opt.defer_domain_grad_sums();
  backward(sum(mul(m.w, m.w)));
  CHECK_THROWS_WITH(backward(sum(m.w)), Catch::Contains("after the bucket's sum was started") &&
                                            Catch::Contains("w"));
  CHECK_THROWS_WITH(opt.defer_domain_grad_sums(), Catch::Contains("still open"));
}
