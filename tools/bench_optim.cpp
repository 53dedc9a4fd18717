// shardrt-bench-optim: the optimizer step on its own, per sharding mode, on the CPU: persistent bytes per parameter
// (from the arenas, checked against the allocator), the transient peak of a step, and the step time (the slowest
// rank's median). The parameter set is a bundled model's (ViT-S by default, the bench-models config), f32 or bf16;
// grads are a fixed sine pattern written into the grad arena, so only the optimizer is timed.
//
//   mpiexec -n P shardrt-bench-optim [--domain D] [--dtype f32|bf16] [--algorithm adamw|sgd|muon_adamw]
//                                    [--iters I] [--shapes FILE]
//
// The mesh is (P / D) x D. --train times whole training steps instead (forward, backward, step of a ViT on one
// image per ddp rank) in replicated, ddp (ZeRO-2) and zero3 (ZeRO-3): the step time, the bytes per parameter at
// rest and the peak of a step, and zero3's communication: the seconds its handles left exposed (issue + wait)
// against the same collectives run blocking on their own (comm total), the difference being what hid behind
// compute. --shapes writes the parameter shapes as JSON for tools/bench_optim_torch.py, which times
// PyTorch's AdamW (foreach) on the same set.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include "autograd/tape.h"
#include "models/model.h"
#include "optim/optimizer.h"
#include "patches/shard_tensor.h"
#include "runtime/factories.h"
#include "runtime/allocator.h"
#include "tools/bench_util.h"
#include "tools/mpi_session.h"

using namespace shardrt;
using namespace shardrt::optim;

namespace {

const char* kVitS = R"({"img_size": [128, 128], "patch_size": 8, "in_channels": 3, "num_classes": 10,
                        "embed_dim": 384, "num_heads": 6, "depth": 6})";

void fill_grads(const Optimizer& opt) {
  for (size_t gi = 0; gi < opt.num_groups(); ++gi) {
    const Tensor& g = opt.grad_arena(gi).buffer();
    Tensor f = Tensor::empty(g.shape(), DType::f32);
    float* p = f.data<float>();
    for (int64_t i = 0; i < f.numel(); ++i) p[i] = static_cast<float>(1e-3 * std::sin(0.37 * static_cast<double>(i)));
    g.copy_(f);
  }
}

struct Row {
  std::string mode;
  double bytes_per_param = 0, transient_per_param = 0, step_ms = 0;
  bool allocator_agrees = false;
};

// ---- --train: whole training steps per mode (ZeRO-3 overlap) ----
const char* kVitTrain = R"({"img_size": [64, 64], "patch_size": 8, "in_channels": 3, "num_classes": 10,
                            "embed_dim": 384, "num_heads": 6, "depth": 6})";

struct TrainRow {
  std::string mode;
  double step_ms = 0, rest_bpp = 0, peak_bpp = 0, exposed_ms = 0, comm_ms = 0;
};

// The zero3 step's collectives (per block: forward and backward gathers, one reduce-scatter) run blocking, with no
// compute around them: what the step would wait if nothing overlapped.
double blocking_comm_seconds(const Mesh& mesh, const Optimizer& opt, const Zero3Stats& per_step) {
  if (mesh.shape()[0] == 1) return 0;
  const Communicator& ddp = mesh.axis(mesh.axis_names()[0]);
  const size_t blocks = opt.num_groups() - 1;  // group 0: the root unit
  double total = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double s = 0;
    for (size_t gi = 1; gi < opt.num_groups(); ++gi) {
      const ArenaLayout& L = opt.layout(gi);
      Tensor shard = zeros({L.shard_numel}), whole = zeros({L.total()});
      const int64_t gathers = per_step.gathers / static_cast<int64_t>(blocks) + (static_cast<int64_t>(gi) <= per_step.gathers % static_cast<int64_t>(blocks) ? 1 : 0);
      s += bench::slowest_rank_seconds([&] {
        for (int64_t k = 0; k < gathers; ++k) ddp.all_gather(shard, whole);
        ddp.reduce_scatter(whole, shard);
      });
    }
    total = rep == 0 ? s : std::min(total, s);
  }
  return total;
}

std::vector<TrainRow> train_table(const Mesh& mesh, int iters) {
  std::vector<TrainRow> rows;
  const int ddp = mesh.shape()[0];
  Generator gen(5);
  const Tensor x = randn({ddp, 3, 64, 64}, {DType::f32}, &gen), gy = randn({ddp, 10}, {DType::f32}, &gen);
  for (ShardingMode mode : {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::zero3}) {
    auto model = models::build_model("vit", models::Json::parse(kVitTrain), {DType::f32});
    int64_t model_bytes = 0;
    for (const Tensor& p : model->parameters()) model_bytes += static_cast<int64_t>(p.nbytes());
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    OptimizerConfig cfg;
    cfg.mode = mode;
    Optimizer opt(mesh, *model, cfg);
    const ShardTensor xs = distribute(x, mesh, model->input_placements("x", x.shape(), mesh),
                                      model->input_extents("x", x.shape(), mesh));
    auto step = [&] {
      backward_global(model->forward({{"x", xs}})[0], gy);
      opt.step();
    };
    step();  // warm-up
    std::vector<double> times;
    int64_t peak = 0;
    opt.reset_zero3_stats();
    for (int i = 0; i < iters; ++i) {
      reset_peak_memory(Device::cpu());
      times.push_back(bench::slowest_rank_seconds(step));
      peak = std::max(peak, memory_stats(Device::cpu()).peak_bytes - before + model_bytes);
    }
    std::sort(times.begin(), times.end());
    TrainRow r;
    r.mode = sharding_mode_name(mode);
    r.step_ms = 1e3 * times[times.size() / 2];
    const OptimizerMemory mem = opt.memory();
    r.rest_bpp = mem.bytes_per_parameter();
    r.peak_bpp = static_cast<double>(bench::max_over_ranks(peak)) / static_cast<double>(mem.num_parameters);
    if (mode == ShardingMode::zero3) {
      Zero3Stats st = opt.zero3_stats();
      const double n = iters;
      r.exposed_ms = 1e3 * bench::max_over_ranks((st.issue_s + st.gather_wait_s + st.reduce_wait_s) / n);
      st.gathers /= iters;
      r.comm_ms = 1e3 * blocking_comm_seconds(mesh, opt, st);
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  CLI::App app{"shardrt-bench-optim: optimizer step time and bytes per parameter per sharding mode"};
  int domain = 1, iters = 10;
  std::string dtype_name_s = "f32", algorithm = "adamw", shapes_path;
  app.add_option("--domain", domain, "domain ranks of the mesh (ddp = P / domain)");
  app.add_option("--dtype", dtype_name_s, "parameter dtype: f32, or bf16 (f32 master weights)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--algorithm", algorithm, "adamw, sgd or muon_adamw")
      ->check(CLI::IsMember({"adamw", "sgd", "muon_adamw"}));
  app.add_option("--iters", iters, "timed steps per mode")->check(CLI::PositiveNumber);
  app.add_option("--shapes", shapes_path, "write the parameter shapes as JSON here");
  bool train = false;
  app.add_flag("--train", train, "time whole training steps (forward, backward, step) incl. zero3 instead");
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  const DType dtype = dtype_name_s == "bf16" ? DType::bf16 : DType::f32;

  const Mesh mesh(MPI_COMM_WORLD, -1, domain, tools::bench_comm_options(tools::BenchGpu::none));
  if (train) {
    const std::vector<TrainRow> rows = train_table(mesh, iters);
    if (session.is_root()) {
      std::printf("shardrt-bench-optim --train: ViT 64x64 patch 8 embed 384 depth 6, AdamW f32, %s, one image per ddp "
                  "rank, %d timed steps\n",
                  mesh.str().c_str(), iters);
      std::printf("%-11s %10s %14s %14s %14s %14s %8s\n", "mode", "step ms", "B/param rest", "B/param peak",
                  "exposed ms", "comm total ms", "hidden");
      for (const TrainRow& r : rows) {
        const bool z = r.mode == "zero3" && r.comm_ms > 0;
        std::printf("%-11s %10.1f %14.2f %14.2f %14s %14s %8s\n", r.mode.c_str(), r.step_ms, r.rest_bpp, r.peak_bpp,
                    z ? bench::two_decimals(r.exposed_ms).c_str() : "-", z ? bench::two_decimals(r.comm_ms).c_str() : "-",
                    z ? (bench::two_decimals(100 * std::max(0.0, 1 - r.exposed_ms / r.comm_ms)) + "%").c_str() : "-");
      }
    }
    return 0;
  }
  std::vector<Row> rows;
  for (ShardingMode mode : {ShardingMode::replicated, ShardingMode::ddp, ShardingMode::mesh}) {
    auto model = models::build_model("vit", models::Json::parse(kVitS), {dtype});
    if (!shapes_path.empty() && session.is_root() && mode == ShardingMode::replicated) {
      models::Json j = models::Json::array();
      for (const auto& [name, p] : model->named_parameters()) j.push_back({{"name", name}, {"shape", p.shape()}});
      std::ofstream(shapes_path) << j.dump(1);
    }
    int64_t model_bytes = 0;
    for (const Tensor& p : model->parameters()) model_bytes += static_cast<int64_t>(p.nbytes());
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    OptimizerConfig cfg;
    cfg.algorithm = parse_algorithm(algorithm);
    cfg.mode = mode;
    cfg.sgd.momentum = 0.9;
    Optimizer opt(mesh, *model, cfg);
    Row r;
    r.mode = sharding_mode_name(mode);
    const OptimizerMemory mem = opt.memory();
    r.allocator_agrees = memory_stats(Device::cpu()).current_bytes - before == mem.total() - model_bytes;
    r.bytes_per_param = mem.bytes_per_parameter();
    std::vector<double> times;
    int64_t transient = 0;
    for (int i = 0; i < iters + 1; ++i) {
      fill_grads(opt);
      reset_peak_memory(Device::cpu());
      const int64_t held = memory_stats(Device::cpu()).current_bytes;
      const double s = bench::slowest_rank_seconds([&] { opt.step(); });
      transient = std::max(transient, memory_stats(Device::cpu()).peak_bytes - held);
      if (i > 0) times.push_back(s);  // the first step is a warm-up
    }
    std::sort(times.begin(), times.end());
    r.step_ms = 1e3 * times[times.size() / 2];
    r.transient_per_param = static_cast<double>(bench::max_over_ranks(transient)) / static_cast<double>(mem.num_parameters);
    rows.push_back(r);
    if (session.is_root() && mode == ShardingMode::replicated)
      std::printf("shardrt-bench-optim: %s %s, %lld parameters, %s, %d timed steps\n", algorithm.c_str(),
                  dtype_name(dtype), static_cast<long long>(mem.num_parameters), mesh.str().c_str(), iters);
  }
  if (session.is_root()) {
    std::printf("%-11s %16s %20s %10s %9s\n", "mode", "bytes/param", "step transient B/p", "step ms", "allocator");
    for (const Row& r : rows)
      std::printf("%-11s %16.3f %20.3f %10.2f %9s\n", r.mode.c_str(), r.bytes_per_param, r.transient_per_param,
                  r.step_ms, r.allocator_agrees ? "agrees" : "DIFFERS");
  }
  return 0;
}
