// shardrt-bench-optim: the optimizer step on its own, per sharding mode, on the CPU: persistent bytes per parameter
// (from the arenas, checked against the allocator), the transient peak of a step, and the step time (the slowest
// rank's median). The parameter set is a bundled model's (ViT-S by default, the bench-models config), f32 or bf16;
// grads are a fixed sine pattern written into the grad arena, so only the optimizer is timed.
//
//   mpiexec -n P shardrt-bench-optim [--domain D] [--dtype f32|bf16] [--algorithm adamw|sgd|muon_adamw]
//                                    [--iters I] [--shapes FILE]
//
// The mesh is (P / D) x D. --shapes writes the parameter shapes as JSON for tools/bench_optim_torch.py, which times
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

}  // namespace

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  CLI::App app{"shardrt-bench-optim: optimizer step time and bytes per parameter per sharding mode"};
  int domain = 1, iters = 10;
  std::string dtype_name_s = "f32", algorithm = "adamw", shapes_path;
  app.add_option("--domain", domain, "domain ranks of the mesh (ddp = P / domain)");
  app.add_option("--dtype", dtype_name_s, "parameter dtype: f32, or bf16 (f32 master weights)");
  app.add_option("--algorithm", algorithm, "adamw, sgd or muon_adamw");
  app.add_option("--iters", iters, "timed steps per mode");
  app.add_option("--shapes", shapes_path, "write the parameter shapes as JSON here");
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  const DType dtype = dtype_name_s == "bf16" ? DType::bf16 : DType::f32;

  const Mesh mesh(MPI_COMM_WORLD, -1, domain, tools::bench_comm_options(tools::BenchGpu::none));
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
