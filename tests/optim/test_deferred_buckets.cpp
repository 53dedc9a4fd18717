// Deferred domain sums of parameter grads (optim/grad_buckets.h, optim/shard_reduce.h): the patches leave parameter
// grads partial over the domain axis and the optimizer sums them in buckets during backward — with sharded arenas
// reduce-scattered over ddp first, then summed over domain on the owned piece. The smoke matrix in fp64 for the ViT
// and FLARE goldens (every mesh of 1-4 ranks; replicated, ddp, mesh, zero3) against the plain single-rank run within
// 1e-10; the exact collectives and bytes of one step in every mode, computed from the bucket plan and the shard
// layout; the pieces of uneven cuts; the bucket plan; accumulation windows with clipping; f32 accumulation of bf16
// grads; misuse.
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
  t.opt->summon_parameters();  // zero3: the blocks' parameters readable (a no-op in the other modes)
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

// The test's own bucket rule (independent of plan_grad_buckets): slots from the last, closed at >= `bytes`; each
// bucket as its arena range [first, second).
std::vector<std::pair<int64_t, int64_t>> expected_buckets(const ArenaLayout& L, int64_t bytes, int64_t itemsize) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t held = 0, lo = 0, hi = 0;
  bool open = false;
  for (int k = static_cast<int>(L.slots.size()) - 1; k >= 0; --k) {
    const ArenaSlot& s = L.slots[static_cast<size_t>(k)];
    if (!open) hi = s.offset + s.numel, open = true;
    lo = s.offset;
    held += s.numel * itemsize;
    if (held >= bytes) out.push_back({lo, hi}), held = 0, open = false;
  }
  if (open) out.push_back({lo, hi});
  return out;
}

int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

// Elements of [lo, hi) in each of `parts` consecutive blocks of `size` starting at `base`.
std::vector<int64_t> cut(int64_t lo, int64_t hi, int64_t base, int64_t size, int parts) {
  std::vector<int64_t> c;
  for (int j = 0; j < parts; ++j) c.push_back(overlap(lo, hi, base + j * size, base + (j + 1) * size));
  return c;
}

// The ledger kind of a reduce-scatter with these counts: the plain one when every rank gets as much.
std::string scatter_kind(const std::vector<int64_t>& counts) {
  for (int64_t c : counts)
    if (c != counts.front()) return "reduce_scatter_v";
  return "reduce_scatter";
}

}  // namespace

TEST_CASE("deferred buckets: ViT and FLARE in fp64, every mesh and sharding mode (zero3 too), parameters after 2 "
          "clipped steps equal the plain single-rank run's within 1e-10",
          "[optim][deferred][smoke]") {
  const int steps = 2;
  for (const ModelCase& mc : model_cases()) {
    for (auto grid_shape : every_grid()) {
      const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
      const int64_t batch = grid_shape.first;
      // 4 KiB buckets: many of them, so buckets start throughout backward; the modes differ only in the ddp step.
      const auto want = single_rank_values(mc, config(ShardingMode::replicated, 4096), batch, steps);
      for (ShardingMode mode : {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh, ShardingMode::zero3}) {
        const Trained got = train(mesh, mc, config(mode, 4096), batch, steps, /*deferred=*/true);
        INFO(mc.golden << " on " << mesh.str() << " mode " << sharding_mode_name(mode));
        CHECK(max_rel_error(values(*got.model), want) <= 1e-10);
        CHECK(max_rel_error(values(*got.model), values(*golden_model(load_golden(mc.golden)))) > 1e-4);  // it moved
      }
    }
  }
}

TEST_CASE("deferred buckets: one step's exact collectives in every mode, from the bucket plan and the shard layout "
          "— replicated: one all_reduce per bucket over the mesh; ddp / zero3: reduce_scatter(_v) over ddp, then the "
          "domain all_reduce of the owned piece (1/ddp of the bytes); mesh: reduce_scatter(_v) over ddp, then over "
          "domain; zero3 blocks: their shard all_reduced over domain; step() reduce-scatters nothing more",
          "[optim][deferred][ledger]") {
  const ModelCase& mc = model_cases()[0];
  for (auto grid_shape : every_grid()) {
    const auto [ddp, dom] = grid_shape;
    const int P = ddp * dom;
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    const int q = mesh.coords()[0], d = mesh.coords()[1];
    const std::string ddp_axis = mesh.axis_names()[0], dom_axis = mesh.axis_names()[1], flat = mesh.flat().axis();
    for (ShardingMode mode : {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh, ShardingMode::zero3})
      for (int64_t bucket_bytes : {int64_t{4096}, int64_t{1} << 20}) {
        if (mode != ShardingMode::ddp && bucket_bytes != 4096) continue;  // one mode shows the single bucket
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
        // The expected deferred lines, bucket by bucket. zero3: group 0 is the root unit, the others the blocks.
        std::map<std::string, std::pair<int64_t, int64_t>> want;  // key -> calls, bytes
        auto add = [&](const std::string& key, int64_t bytes) { ++want[key].first, want[key].second += bytes; };
        const std::string b = "optimizer.grad_buckets ";
        int64_t buckets = 0, domain_bytes_before = 0, shard_numel = 0;
        for (size_t gi = 0; gi < probe.num_groups(); ++gi) {
          const ArenaLayout& L = probe.layout(gi);
          if (mode == ShardingMode::zero3 && gi > 0) {
            if (dom > 1) add("zero3.reduce_grads all_reduce " + dom_axis, all_reduce_bytes(L.shard_numel, 8, dom));
            continue;
          }
          shard_numel = L.shard_numel;
          const int64_t n = L.shard_numel;
          for (const auto& [lo, hi] : expected_buckets(L, bucket_bytes, 8)) {
            ++buckets;
            const int64_t len = hi - lo;
            domain_bytes_before += all_reduce_bytes(len, 8, dom);  // the whole bucket over domain, as before
            if (mode == ShardingMode::replicated) {
              if (P > 1) add(b + "all_reduce " + flat, all_reduce_bytes(len, 8, P));
            } else if (L.shards == 1) {  // one shard: summed in place over domain
              if (dom > 1) add(b + "all_reduce " + dom_axis, all_reduce_bytes(len, 8, dom));
            } else if (mode != ShardingMode::mesh) {  // shards over ddp: shard q = [q n, (q + 1) n)
              const std::vector<int64_t> c = cut(lo, hi, 0, n, ddp);
              if (ddp > 1) add(b + scatter_kind(c) + " " + ddp_axis, (len - c[q]) * 8);
              if (dom > 1 && c[q] > 0) add(b + "all_reduce " + dom_axis, all_reduce_bytes(c[q], 8, dom));
            } else {  // shards over the mesh: ddp group q owns [q dom n, (q + 1) dom n), rank (q, d) its shard d
              const std::vector<int64_t> c = cut(lo, hi, 0, n * dom, ddp);
              if (ddp > 1) add(b + scatter_kind(c) + " " + ddp_axis, (len - c[q]) * 8);
              const std::vector<int64_t> e = cut(lo, hi, q * n * dom, n, dom);
              if (dom > 1 && c[q] > 0) add(b + scatter_kind(e) + " " + dom_axis, (c[q] - e[d]) * 8);
            }
          }
        }
        INFO("mesh " << mesh.str() << " " << sharding_mode_name(mode) << " bucket_bytes " << bucket_bytes << ": "
                     << buckets << " buckets; rank " << world_rank() << " deferred ledger:\n"
                     << [&] {
                          std::string t;
                          for (const auto& [k, e] : deferred)
                            t += k + " calls " + std::to_string(e.calls) + " bytes " + std::to_string(e.bytes_sent) +
                                 "\n";
                          return t;
                        }());
        // Many buckets, spread over the backward (zero3: the root unit's only — embeddings and head).
        if (bucket_bytes == 4096) CHECK(buckets >= (mode == ShardingMode::zero3 ? 2 : 5));
        if (bucket_bytes == (int64_t{1} << 20)) CHECK(buckets == 1);  // the tiny ViT's grads fit in one MiB
        for (const auto& [key, cb] : want) {
          INFO(key << ": want calls " << cb.first << " bytes " << cb.second);
          REQUIRE(deferred.count(key) == 1);
          CHECK(deferred.at(key).calls == cb.first);
          CHECK(deferred.at(key).bytes_sent == cb.second);
        }
        // The domain sums under ddp sharding: each ddp group sums only its own pieces, so over the ddp ranks
        // together they move what one rank moved before (the whole buckets), each about 1/ddp of it.
        if ((mode == ShardingMode::ddp || mode == ShardingMode::zero3) && ddp > 1 && dom > 1) {
          const std::string key = b + "all_reduce " + dom_axis;
          int64_t mine = deferred.count(key) ? deferred.at(key).bytes_sent : 0, all = 0;
          MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
          INFO("domain bytes: this rank " << mine << ", before " << domain_bytes_before);
          CHECK(all == dom * domain_bytes_before);  // every world rank: dom ranks per ddp group
          CHECK(mine <= all_reduce_bytes(shard_numel, 8, dom));
          CHECK(mine < domain_bytes_before);
        }
        // The step's own grad reduction is gone: the buckets made it.
        std::string dropped;
        if (ddp > 1)
          dropped = mode == ShardingMode::replicated ? "optimizer.reduce_grads all_reduce " + ddp_axis
                                                     : "optimizer.reduce_grads reduce_scatter " + ddp_axis;
        if (!dropped.empty()) {
          CHECK(plain.count(dropped) == 1);
          CHECK(deferred.count(dropped) == 0);
        }
        // Everything else: forward and optimizer lines identical; backward lines never more, in total fewer calls.
        int64_t backward_plain = 0, backward_deferred = 0;
        for (const auto& [key, e] : plain) {
          if (key == dropped) continue;
          const bool backward_line = e.scope.size() > 9 && e.scope.compare(e.scope.size() - 9, 9, ".backward") == 0;
          const LedgerEntry* got = deferred.count(key) ? &deferred.at(key) : nullptr;
          INFO(key);
          if (backward_line) {
            backward_plain += e.calls;
            backward_deferred += got ? got->calls : 0;
            if (got) CHECK(got->bytes_sent <= e.bytes_sent);
          } else {
            REQUIRE(got);
            CHECK(got->calls == e.calls);
            CHECK(got->bytes_sent == e.bytes_sent);
          }
        }
        for (const auto& [key, e] : deferred) {
          INFO(key);
          CHECK((plain.count(key) == 1 || want.count(key) == 1));
        }
        // (One domain rank: the patches' skipped sums were 1-rank calls of no bytes, still counted as calls.)
        if (dom > 1) CHECK(backward_deferred < backward_plain);
        else CHECK(backward_deferred <= backward_plain);
      }
  }
}

TEST_CASE("deferred buckets: the pieces of an uneven cut — counts per ddp rank and per domain rank, the own piece, "
          "zero-size pieces",
          "[optim][deferred]") {
  // 3 ddp x 2 domain, 5 elements per shard. Shards over ddp: rank q owns [5q, 5q + 5).
  ShardCut over_ddp{5, 3, 1, 2, 0, false};
  CHECK(over_ddp.batch_counts(3, 12) == std::vector<int64_t>{2, 5, 2});
  CHECK(over_ddp.own_piece(3, 12) == std::pair<int64_t, int64_t>{5, 10});
  CHECK(over_ddp.batch_counts(0, 4) == std::vector<int64_t>{4, 0, 0});  // ranks 1, 2 receive nothing
  CHECK(over_ddp.own_piece(0, 4) == std::pair<int64_t, int64_t>{5, 5});  // empty, inside the own shard
  CHECK(over_ddp.segment_piece(11, 14) == std::pair<int64_t, int64_t>{10, 10});
  CHECK(over_ddp.own_piece(3, 7) == std::pair<int64_t, int64_t>{5, 7});
  // Shards over the mesh: ddp group q owns [10q, 10q + 10), rank (q, d) the shard [10q + 5d, 10q + 5d + 5).
  ShardCut over_mesh{5, 3, 1, 2, 1, true};
  CHECK(over_mesh.segment_numel() == 10);
  CHECK(over_mesh.own_shard() == 3);
  CHECK(over_mesh.batch_counts(7, 23) == std::vector<int64_t>{3, 10, 3});
  CHECK(over_mesh.domain_counts(10, 20) == std::vector<int64_t>{5, 5});
  CHECK(over_mesh.domain_counts(12, 14) == std::vector<int64_t>{2, 0});  // domain rank 1 receives nothing
  CHECK(over_mesh.own_piece(12, 18) == std::pair<int64_t, int64_t>{15, 18});
  CHECK(over_mesh.segment_piece(0, 12) == std::pair<int64_t, int64_t>{10, 12});
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

TEST_CASE("deferred buckets: bf16 grads are summed in f32 — into the shard exactly, in place rounded once to bf16",
          "[optim][deferred][bf16]") {
  for (auto grid_shape : every_grid()) {
    const auto [ddp, dom] = grid_shape;
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    for (ShardingMode mode : {ShardingMode::ddp, ShardingMode::mesh}) {
      ToyParams m(DType::bf16);
      OptimizerConfig cfg;
      cfg.algorithm = Algorithm::sgd;
      cfg.sgd = {.lr = 0.1, .momentum = 0.9};  // the first step's momentum buffer is the reduced grad, in f32
      cfg.mode = mode;
      cfg.bucket_bytes = 16;
      Optimizer opt(mesh, m, cfg);
      // Rank r's grad element i: 1 + ((r + i) mod 5) / 128, exact in bf16; their sums over the ranks mostly are not
      // (bf16 holds 8 significant bits), but they are in f32.
      std::vector<double> want(static_cast<size_t>(opt.layout(0).total()), 0.0);
      {
        auto scope = opt.defer_domain_grad_sums();
        for (const ArenaSlot& slot : opt.layout(0).slots) {
          std::vector<double> g(static_cast<size_t>(slot.numel));
          for (int64_t i = 0; i < slot.numel; ++i) {
            g[static_cast<size_t>(i)] = 1 + static_cast<double>((world_rank() + i) % 5) / 128;
            for (int r = 0; r < world_size(); ++r)
              want[static_cast<size_t>(slot.offset + i)] += (1 + static_cast<double>((r + i) % 5) / 128) / ddp;
          }
          Tensor param;
          for (auto& [name, p] : m.named_parameters())
            if (name == slot.name) param = p;
          grad_of(param).copy_(from_vector(g, slot.shape, {DType::f64}).to(DType::bf16));
        }
      }
      opt.step();
      const ArenaLayout& L = opt.layout(0);
      const std::vector<double> buf = opt.state_shard(0, "momentum_buffer").to_vector();
      const int64_t begin = L.shard_begin(opt.plan().own_shard);
      const bool into_shard = L.shards > 1;  // else summed in place in the bf16 arena
      double err = 0;
      int64_t compared = 0;
      for (const ArenaSlot& slot : L.slots)
        for (int64_t i = std::max(slot.offset, begin); i < std::min(slot.offset + slot.numel, begin + L.shard_numel);
             ++i, ++compared)
          err = std::fmax(err, std::fabs(buf[static_cast<size_t>(i - begin)] - want[static_cast<size_t>(i)]) /
                                   want[static_cast<size_t>(i)]);
      INFO("mesh " << mesh.str() << " " << sharding_mode_name(mode) << ": max relative error " << err);
      CHECK(compared > 0);
      // Into the shard: f32 sums of these values are exact; only the f32 scale 1/ddp rounds (bf16 sums would be off
      // by up to 2^-9). In place: one rounding to bf16.
      if (into_shard) CHECK(err <= 1e-6);
      else CHECK(err <= std::ldexp(1.0, -8));
    }
  }
}

TEST_CASE("deferred buckets: an accumulation window sums once at its last micro-batch, clipped, in every sharded "
          "mode; mixing deferred and plain micro-batches, or a second backward into a started bucket, is a ValueError",
          "[optim][deferred][accumulation]") {
  const ModelCase& mc = model_cases()[0];
  for (auto grid_shape : every_grid()) {
    const Mesh mesh = grid(grid_shape, std::make_shared<CommLedger>());
    const int64_t batch = grid_shape.first;
    for (ShardingMode mode : {ShardingMode::ddp, ShardingMode::mesh, ShardingMode::zero3}) {
      OptimizerConfig cfg = config(mode, 4096);
      cfg.accumulation_steps = 2;
      std::vector<std::vector<double>> result[2];
      double norm[2] = {0, 0};
      for (bool defer : {false, true}) {
        auto model = golden_model(load_golden(mc.golden));
        Optimizer opt(mesh, *model, cfg);
        for (int micro = 0; micro < 4; ++micro) {
          forward_backward(mesh, *model, mc, batch, static_cast<uint64_t>(micro), defer ? &opt : nullptr);
          CHECK(opt.step() == (micro % 2 == 1));
        }
        norm[defer] = opt.last_grad_norm();
        opt.summon_parameters();
        result[defer] = values(*model);
      }
      INFO("mesh " << mesh.str() << " " << sharding_mode_name(mode) << ": grad norms " << norm[0] << ", " << norm[1]);
      CHECK(norm[0] > cfg.max_grad_norm);  // the clipping was active
      CHECK(std::fabs(norm[1] - norm[0]) <= 1e-12 * norm[0]);
      CHECK(max_rel_error(result[1], result[0]) <= 1e-12);
    }

    OptimizerConfig cfg = config(ShardingMode::mesh, 4096);
    cfg.accumulation_steps = 2;
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
