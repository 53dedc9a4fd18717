// shardrt-bench-models: the ShardRT side of tools/bench-models — one round of one bundled-model workload in this
// (fresh) process, f32 on the CPU, printing one JSON line like tools/bench_models_torch.py does for PhysicsNeMo's
// own modules, so the script can put the two side by side.
//
//   shardrt-bench-models --model M --threads N --mode fwd|fwdbwd --warmup W --iters I [--data DIR]
//   mpiexec -n P shardrt-bench-models --model M --memory [--data DIR]
//
// Workloads (the same configs as the PyTorch side, tools/bench_models_torch.py says them in full): vit, ViT-S on
// 128² images (patch 8 -> 256 tokens, E 384, 6 heads, depth 6, 10 classes); flare, FLARE on Darcy 85² (7,225
// points, n_hidden 128, 8 heads, 4 layers, 64 slices); geo_gale and geo_fa, GeoTransolver on Darcy 85² (GALE
// weighted and GALE_FA concat_project, models-spec §5); geo_local, GeoTransolver with local features on 10^5
// points and a 2*10^4-point geometry. With --data DIR (what `bench_models_torch.py --export DIR` wrote) the
// weights are PhysicsNeMo's, so the checksums must agree with the PyTorch side's (except geo_local's: PhysicsNeMo's
// Warp ball query keeps other neighbours); without it the model's own initialisation is used. ViT and FLARE
// inputs are the same sine formula on both sides: element i of input `seed` is offset + scale * sin(0.37 i + seed);
// the GeoTransolver inputs are read from DIR (<model>.inputs.safetensors), so those need --data.
// geo_local also times its radius searches alone (both directions of both scales, on the same points, one rank)
// and reports them next to the step: radius_search_ms.
//
// --memory runs one forward+backward on a 1 x P (domain) mesh, the inputs scattered in the model's layout, and
// prints each rank's allocator peak above what it held before the step (activations, saved tensors, grads), the
// maximum over ranks being the per-rank peak of the table, and the bytes of the parameter grads within it (f32,
// replicated on every domain rank by design: the optimizer shards them over ddp, not over domain).
#include <mpi.h>
#include <time.h>

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
#include "patches/ops.h"
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

// CPU time of the whole process (all threads), in ms.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}

const std::string kModels = "vit, flare, geo_gale, geo_fa or geo_local";

struct InputRecipe {
  std::string name;
  Shape shape;
  double seed, scale, offset;
};

struct Workload {
  std::string kind;  // the bundled model's registry name
  models::Json config;
  std::vector<InputRecipe> inputs;  // empty: read from the export (--data)
};

Workload workload(const std::string& model) {
  if (model == "vit")
    return {"vit", models::Json::parse(R"({"img_size": [128, 128], "patch_size": 8, "in_channels": 3, "num_classes": 10,
                                    "embed_dim": 384, "num_heads": 6, "depth": 6})"),
            {{"x", {1, 3, 128, 128}, 1, 1.0, 0.0}}};
  if (model == "flare")
    return {"flare", models::Json::parse(R"({"functional_dim": 1, "out_dim": 1, "embedding_dim": 2, "n_layers": 4,
                                    "n_hidden": 128, "n_head": 8, "mlp_ratio": 4, "slice_num": 64,
                                    "structured_shape": [85, 85]})"),
            {{"fx", {1, 7225, 1}, 1, 1.0, 0.0}, {"embedding", {1, 7225, 2}, 2, 0.5, 0.5}}};
  const char* darcy = R"({"functional_dim": 3, "out_dim": 1, "geometry_dim": 3, "n_layers": 4, "n_hidden": 128,
                          "n_head": 4, "mlp_ratio": 4, "slice_num": 64, "structured_shape": [85, 85]})";
  if (model == "geo_gale") return {"geotransolver", models::Json::parse(darcy), {}};
  if (model == "geo_fa") {
    models::Json c = models::Json::parse(darcy);
    c["attention_type"] = "GALE_FA";
    c["state_mixing_mode"] = "concat_project";
    return {"geotransolver", c, {}};
  }
  if (model == "geo_local")
    return {"geotransolver",
            models::Json::parse(R"({"functional_dim": 3, "out_dim": 4, "geometry_dim": 3, "n_layers": 2,
                                    "n_hidden": 64, "n_head": 4, "mlp_ratio": 2, "slice_num": 32,
                                    "include_local_features": true, "radii": [0.05, 0.25],
                                    "neighbors_in_radius": [8, 32], "n_hidden_local": 32})"),
            {}};
  throw CLI::ValidationError("--model", "unknown model " + model + " (" + kModels + ")");
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
  auto model = models::build_model(workload(name).kind, workload(name).config, {DType::f32, /*seed=*/0});
  if (!data.empty()) model->load_state_dict(load_weights(data + "/" + name + ".weights.safetensors").tensors);
  return model;
}

// The full inputs, the same on every rank: the sine recipes, or the export's inputs file.
std::map<std::string, Tensor> full_inputs(const std::string& name, const std::string& data) {
  std::map<std::string, Tensor> out;
  const Workload w = workload(name);
  for (const InputRecipe& r : w.inputs) out[r.name] = sine_input(r);
  if (w.inputs.empty()) {
    if (data.empty())
      throw CLI::ValidationError("--data", "--model " + name + " reads its inputs from the export: pass --data DIR "
                                 "(tools/bench_models_torch.py --model " + name + " --export DIR)");
    const SafetensorsFile file = load_safetensors(data + "/" + name + ".inputs.safetensors");
    for (const auto& [k, t] : file.tensors()) out[k] = t;  // the tensors keep the mapping alive
  }
  return out;
}

// The inputs on `mesh` in the model's own layout (every rank builds the same full inputs: no scatter needed).
std::map<std::string, ShardTensor> inputs_on(const models::Model& model, const std::map<std::string, Tensor>& full,
                                             const Mesh& mesh) {
  std::map<std::string, ShardTensor> out;
  for (const auto& [name, t] : full) {
    const Placements p = model.input_placements(name, t.shape(), mesh);
    const AxisExtents e = model.input_extents(name, t.shape(), mesh);
    out[name] = e.empty() ? distribute(t, mesh, p) : distribute(t, mesh, p, e);
  }
  return out;
}

// The radius searches of a local-features GeoTransolver step, alone: for every scale, the context direction
// (points = local_positions, queries = geometry) and the local one (the reverse), on sample 0, replicated on a
// one-rank mesh. Median ms of `iters` rounds.
double radius_search_ms(const std::map<std::string, Tensor>& full, const models::Json& config, int iters,
                        const Mesh& mesh) {
  const Placements rep{Placement::Replicate(), Placement::Replicate()};
  const ShardTensor pos = distribute(full.at("local_positions").select(0, 0).contiguous(), mesh, rep);
  const ShardTensor geo = distribute(full.at("geometry").select(0, 0).contiguous(), mesh, rep);
  const auto radii = config.at("radii").get<std::vector<double>>();
  const auto ks = config.at("neighbors_in_radius").get<std::vector<int64_t>>();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t j = 0; j < radii.size(); ++j) {
      radius_search(pos, geo, radii[j], ks[j]);
      radius_search(geo, pos, radii[j], ks[j]);
    }
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int timed(const std::string& name, const std::string& mode, int threads, int warmup, int iters,
          const std::string& data) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  const Mesh mesh(MPI_COMM_SELF, 1, 1);
  auto model = build(name, data);
  const auto full = full_inputs(name, data);
  const auto inputs = inputs_on(*model, full, mesh);
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
  // Wall clock, and the process's CPU time (all threads): on a shared machine the steadier figure, since waiting
  // for a core is not counted.
  std::vector<double> ms, cpu;
  for (int i = 0; i < iters; ++i) {
    const double c0 = process_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(process_cpu_ms() - c0);
  }
  std::vector<double> sorted = ms, cpu_sorted = cpu;
  std::sort(sorted.begin(), sorted.end());
  std::sort(cpu_sorted.begin(), cpu_sorted.end());
  const auto median_of = [](const std::vector<double>& v) {
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  const double median = median_of(sorted);
  std::string sums = "{\"output\": " + checksum({out});
  if (bwd) {
    std::vector<Tensor> grads;
    for (const Tensor& p : params) grads.push_back(grad_of(p));
    sums += ", \"grad_params\": " + checksum(grads);
  }
  sums += "}";
  const models::Json& config = workload(name).config;
  std::string search;
  if (config.value("include_local_features", false)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", \"radius_search_ms\": %.4f", radius_search_ms(full, config, iters, mesh));
    search = buf;
  }
  std::printf("{\"bench\": \"bench-models\", \"impl\": \"shardrt\", \"model\": \"%s\", \"mode\": \"%s\", \"threads\": %d, "
              "\"warmup\": %d, \"iters\": %d, \"params\": %lld, \"min_ms\": %.4f, \"median_ms\": %.4f, "
              "\"cpu_min_ms\": %.4f, \"cpu_median_ms\": %.4f, \"peak_bytes\": %lld, \"checksum\": %s%s}\n",
              name.c_str(), mode.c_str(), threads, warmup, iters, static_cast<long long>(model->num_parameters()),
              sorted.front(), median, cpu_sorted.front(), median_of(cpu_sorted),
              static_cast<long long>(memory_stats(Device::cpu()).peak_bytes), sums.c_str(), search.c_str());
  return 0;
}

int memory(const std::string& name, const std::string& data, const tools::MpiSession& session) {
  omp_set_num_threads(1);
  openblas_set_num_threads(1);
  const Mesh mesh(MPI_COMM_WORLD, 1, session.size());
  auto model = build(name, data);
  const auto inputs = inputs_on(*model, full_inputs(name, data), mesh);
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
  app.add_option("--model", model, kModels)
      ->required()
      ->check(CLI::IsMember({"vit", "flare", "geo_gale", "geo_fa", "geo_local"}));
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
