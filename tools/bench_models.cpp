// shardrt-bench-models: the ShardRT side of tools/bench-models — one round of one bundled-model workload in this
// (fresh) process, f32 on the CPU, printing one JSON line like tools/bench_models_torch.py does for PhysicsNeMo's
// own modules, so the script can put the two side by side.
//
//   shardrt-bench-models --model vit|flare --threads N --mode fwd|fwdbwd --warmup W --iters I [--data DIR]
//   mpiexec -n P shardrt-bench-models --model vit|flare --memory [--data DIR]
//
// Workloads (the same configs as the PyTorch side): ViT-S on 128² images (patch 8 -> 256 tokens, E 384, 6 heads,
// depth 6, 10 classes) and FLARE on Darcy 85² (7,225 points, n_hidden 128, 8 heads, 4 layers, 64 slices). With
// --data DIR (what `bench_models_torch.py --export DIR` wrote) the weights are PhysicsNeMo's, so the checksums must
// agree with the PyTorch side's; without it the model's own initialisation is used. Inputs are the same sine
// formula on both sides: element i of input `seed` is offset + scale * sin(0.37 i + seed).
//
// --memory runs one forward+backward on a 1 x P (domain) mesh, the inputs scattered in the model's layout, and
// prints each rank's allocator peak above what it held before the step (activations, saved tensors, grads), the
// maximum over ranks being the per-rank peak of the table, and the bytes of the parameter grads within it (f32,
// replicated on every domain rank by design: the optimizer shards them over ddp, not over domain).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/tape.h"
#include "mesh/mesh.h"
#include "models/model.h"
#include "patches/shard_tensor.h"
#include "runtime/allocator.h"
#include "runtime/factories.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tools/mpi_session.h"

extern "C" void openblas_set_num_threads(int);
#include <omp.h>

using namespace shardrt;

namespace {

struct InputRecipe {
  std::string name;
  Shape shape;
  double seed, scale, offset;
};

struct Workload {
  models::Json config;
  std::vector<InputRecipe> inputs;
};

Workload workload(const std::string& model) {
  if (model == "vit")
    return {models::Json::parse(R"({"img_size": [128, 128], "patch_size": 8, "in_channels": 3, "num_classes": 10,
                                    "embed_dim": 384, "num_heads": 6, "depth": 6})"),
            {{"x", {1, 3, 128, 128}, 1, 1.0, 0.0}}};
  if (model == "flare")
    return {models::Json::parse(R"({"functional_dim": 1, "out_dim": 1, "embedding_dim": 2, "n_layers": 4,
                                    "n_hidden": 128, "n_head": 8, "mlp_ratio": 4, "slice_num": 64,
                                    "structured_shape": [85, 85]})"),
            {{"fx", {1, 7225, 1}, 1, 1.0, 0.0}, {"embedding", {1, 7225, 2}, 2, 0.5, 0.5}}};
  throw CLI::ValidationError("--model", "unknown model " + model + " (vit or flare)");
}

Tensor sine_input(const InputRecipe& r) {
  Tensor t = Tensor::empty(r.shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>(r.offset + r.scale * std::sin(0.37 * static_cast<double>(i) + r.seed));
  return t;
}

Tensor cosine_grad(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
  return t;
}

// [sum, sum of squares] over all of `ts`, in double, as the PyTorch side prints them.
std::string checksum(const std::vector<Tensor>& ts) {
  double s = 0, q = 0;
  for (const Tensor& t : ts)
    for (double v : t.to_vector()) s += v, q += v * v;
  char buf[80];
  std::snprintf(buf, sizeof buf, "[%.9g, %.9g]", s, q);
  return buf;
}

std::unique_ptr<models::Model> build(const std::string& name, const std::string& data) {
  auto model = models::build_model(name, workload(name).config, {DType::f32, /*seed=*/0});
  if (!data.empty()) model->load_state_dict(load_weights(data + "/" + name + ".weights.safetensors").tensors);
  return model;
}

// The inputs on `mesh` in the model's own layout (every rank builds the same full inputs: no scatter needed).
std::map<std::string, ShardTensor> inputs_on(const models::Model& model, const std::string& name, const Mesh& mesh) {
  std::map<std::string, ShardTensor> out;
  for (const InputRecipe& r : workload(name).inputs) {
    const Tensor full = sine_input(r);
    const Placements p = model.input_placements(r.name, full.shape(), mesh);
    const AxisExtents e = model.input_extents(r.name, full.shape(), mesh);
    out[r.name] = e.empty() ? distribute(full, mesh, p) : distribute(full, mesh, p, e);
  }
  return out;
}

int timed(const std::string& name, const std::string& mode, int threads, int warmup, int iters,
          const std::string& data) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  const Mesh mesh(MPI_COMM_SELF, 1, 1);
  auto model = build(name, data);
  const auto inputs = inputs_on(*model, name, mesh);
  const bool bwd = mode == "fwdbwd";
  const std::vector<Tensor> params = model->parameters();
  Tensor out, gout;
  auto step = [&] {
    if (bwd) {
      for (Tensor p : params) zero_grad(p);
      ShardTensor y = model->forward(inputs)[0];
      if (!gout.defined()) gout = cosine_grad(y.global_shape());
      backward_global(y, gout);
      out = y.local();
    } else {
      NoGradGuard no_grad;
      out = model->forward(inputs)[0].local();
    }
  };
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                          : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
  std::string sums = "{\"output\": " + checksum({out});
  if (bwd) {
    std::vector<Tensor> grads;
    for (const Tensor& p : params) grads.push_back(grad_of(p));
    sums += ", \"grad_params\": " + checksum(grads);
  }
  sums += "}";
  std::printf("{\"bench\": \"bench-models\", \"impl\": \"shardrt\", \"model\": \"%s\", \"mode\": \"%s\", \"threads\": %d, "
              "\"warmup\": %d, \"iters\": %d, \"params\": %lld, \"min_ms\": %.4f, \"median_ms\": %.4f, "
              "\"peak_bytes\": %lld, \"checksum\": %s}\n",
              name.c_str(), mode.c_str(), threads, warmup, iters, static_cast<long long>(model->num_parameters()),
              sorted.front(), median, static_cast<long long>(memory_stats(Device::cpu()).peak_bytes), sums.c_str());
  return 0;
}

int memory(const std::string& name, const std::string& data, const tools::MpiSession& session) {
  omp_set_num_threads(1);
  openblas_set_num_threads(1);
  const Mesh mesh(MPI_COMM_WORLD, 1, session.size());
  auto model = build(name, data);
  const auto inputs = inputs_on(*model, name, mesh);
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  reset_peak_memory(Device::cpu());
  {
    ShardTensor y = model->forward(inputs)[0];
    backward_global(y, cosine_grad(y.global_shape()));
  }
  const int64_t peak = memory_stats(Device::cpu()).peak_bytes - before;
  std::vector<long long> all(static_cast<size_t>(session.size()));
  long long mine = peak;
  MPI_Gather(&mine, 1, MPI_LONG_LONG, all.data(), 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  if (session.is_root()) {
    std::printf("{\"bench\": \"bench-models\", \"impl\": \"shardrt\", \"model\": \"%s\", \"memory\": true, "
                "\"domain\": %d, \"params\": %lld, \"param_grad_bytes\": %lld, \"peak_bytes_per_rank\": [",
                name.c_str(), session.size(), static_cast<long long>(model->num_parameters()),
                static_cast<long long>(model->num_parameters() * 4));
    for (size_t i = 0; i < all.size(); ++i) std::printf("%s%lld", i ? ", " : "", all[i]);
    std::printf("], \"max_peak_bytes\": %lld}\n", *std::max_element(all.begin(), all.end()));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  CLI::App app{"One bundled-model workload in ShardRT (tools/bench-models runs it next to PyTorch)."};
  std::string model, mode = "fwd", data;
  int threads = 1, warmup = 2, iters = 10;
  bool mem = false;
  app.add_option("--model", model, "vit or flare")->required()->check(CLI::IsMember({"vit", "flare"}));
  app.add_option("--mode", mode, "fwd or fwdbwd")->check(CLI::IsMember({"fwd", "fwdbwd"}));
  app.add_option("--threads", threads, "OpenMP (and BLAS) threads")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--iters", iters, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--data", data, "folder written by bench_models_torch.py --export (PhysicsNeMo's weights)");
  app.add_flag("--memory", mem, "per-rank peak bytes of one forward+backward on a 1 x P domain mesh (under mpiexec)");
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  int rc = 0;
  try {
    rc = mem ? memory(model, data, session) : timed(model, mode, threads, warmup, iters, data);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardrt-bench-models: %s\n", e.what());
    rc = 2;
  }
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
