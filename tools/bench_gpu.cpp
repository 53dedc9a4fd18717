// shardrt-bench-gpu: the GPU numbers of tools/device-check, one CSV row per measurement on stdout (and a progress
// line per row on stderr), so a run cut off by its time limit still leaves every row it finished.
//
//   shardrt-bench-gpu [--quick] [--sections gemm,attention,models] [--peak-tflops-f32 67 ...]
//
// Sections:
//   gemm       M = N = K square GEMMs: f32 (cuBLAS, no TF32), tf32 (cuBLASLt, TF32 compute) and bf16 (cuBLAS,
//              f32 accumulate); TFLOP/s = 2 M N K / time, next to the datasheet peak (defaults: H200 SXM dense).
//   attention  kernels/cuda/attention forward and backward in bf16 at head dims 32, 64, 128 and lengths 256 to
//              16k (BH chosen so every row has about 64k query tokens); TFLOP/s with the usual counts, forward
//              4 BH N^2 D and backward 2.5 times that (the algorithmic flops, not counting the recomputation).
//   models     a whole training step (forward, backward, clipped AdamW update) of ViT-S and FLARE on cuda:0,
//              eager and replayed from one CUDA graph (optim/captured_step.h): step ms, tokens/s, MFU against the
//              f32 peak, and the device allocator's peak bytes (extra column). f32 only: the bf16 autocast scope
//              is not on this branch yet. A model whose ops fail on the device reports the error in its row.
// Without a GPU (or in a build without CUDA) it prints "no GPU: skipped" and exits 0.
//
// CSV columns: section,name,dtype,shape,ms,tflops,peak_tflops,percent_of_peak,extra
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/tape.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_lt.h"
#include "mesh/mesh.h"
#include "autograd/ops.h"
#include "models/model.h"
#include "optim/captured_step.h"
#include "optim/optimizer.h"
#include "patches/ops.h"
#include "patches/shard_tensor.h"
#include "runtime/allocator.h"
#include "runtime/cuda_context.h"
#include "runtime/factories.h"

using namespace shardrt;

namespace {

struct Peaks {
  double f32 = 67, tf32 = 494, bf16 = 989;  // H200 SXM datasheet, dense tensor-core TFLOP/s
};

// Median milliseconds of `iters` runs of fn after `warmup`, each run synchronised on the device.
double median_ms(const std::function<void()>& fn, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  cuda_synchronize(0);
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    cuda_synchronize(0);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void row(const std::string& section, const std::string& name, const std::string& dtype, const std::string& shape,
         double ms, double flops, double peak, const std::string& extra = "") {
  const double tflops = ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0;
  std::printf("%s,%s,%s,%s,%.4f,%.2f,%.0f,%.1f,%s\n", section.c_str(), name.c_str(), dtype.c_str(), shape.c_str(), ms,
              tflops, peak, peak > 0 ? 100 * tflops / peak : 0, extra.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "[bench-gpu] %s %s %s %s: %.3f ms, %.1f TFLOP/s\n", section.c_str(), name.c_str(),
               dtype.c_str(), shape.c_str(), ms, tflops);
}

void failed_row(const std::string& section, const std::string& name, const std::string& why) {
  std::string clean = why;
  std::replace(clean.begin(), clean.end(), ',', ';');
  std::replace(clean.begin(), clean.end(), '\n', ' ');
  std::printf("%s,%s,,,,,,,not run: %s\n", section.c_str(), name.c_str(), clean.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "[bench-gpu] %s %s: not run: %s\n", section.c_str(), name.c_str(), why.c_str());
}

Tensor device_randn(const Shape& shape, DType dtype, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, {DType::f32}, &gen).to(dtype).to(Device::cuda(0));
}

void bench_gemm(bool quick, const Peaks& peaks) {
  const std::vector<int64_t> sizes = quick ? std::vector<int64_t>{2048} : std::vector<int64_t>{2048, 4096, 8192};
  for (int64_t n : sizes) {
    const std::string shape = std::to_string(n) + "^3";
    const double flops = 2.0 * n * n * n;
    for (const char* kind : {"f32", "tf32", "bf16"}) {
      const DType dt = std::string(kind) == "bf16" ? DType::bf16 : DType::f32;
      const Tensor a = device_randn({n, n}, dt, 1), b = device_randn({n, n}, dt, 2);
      const Tensor c = Tensor::empty({n, n}, dt, Device::cuda(0));
      const CudaStream s = current_stream(0);
      std::function<void()> fn;
      double peak = peaks.f32;
      if (std::string(kind) == "tf32") {
        peak = peaks.tf32;
        fn = [&] {
          kernels::cuda::gemm_lt(dt, false, false, n, n, n, a.raw_data(), n, b.raw_data(), n, c.raw_data(), n,
                                 kernels::cuda::LtEpilogue::none, nullptr, true, s);
        };
      } else {
        if (dt == DType::bf16) peak = peaks.bf16;
        fn = [&] {
          kernels::cuda::gemm(dt, false, false, n, n, n, 1.0, a.raw_data(), n, b.raw_data(), n, 0.0, c.raw_data(), n,
                              s);
        };
      }
      row("gemm", "gemm", kind, shape, median_ms(fn, 2, quick ? 5 : 10), flops, peak);
    }
  }
}

void bench_attention(bool quick, const Peaks& peaks) {
  const std::vector<int64_t> dims = {32, 64, 128};
  const std::vector<int64_t> lengths =
      quick ? std::vector<int64_t>{256, 4096} : std::vector<int64_t>{256, 1024, 4096, 16384};
  using bf16 = shardrt::bf16;
  for (int64_t d : dims) {
    for (int64_t n : lengths) {
      const int64_t bh = std::max<int64_t>(1, 65536 / n);
      const std::string shape = "BH=" + std::to_string(bh) + " N=" + std::to_string(n) + " D=" + std::to_string(d);
      const Tensor q = device_randn({bh, n, d}, DType::bf16, 3), k = device_randn({bh, n, d}, DType::bf16, 4);
      const Tensor v = device_randn({bh, n, d}, DType::bf16, 5), go = device_randn({bh, n, d}, DType::bf16, 6);
      const Tensor out = Tensor::empty({bh, n, d}, DType::bf16, Device::cuda(0));
      const Tensor lse = Tensor::empty({bh, n}, DType::f32, Device::cuda(0));
      const Tensor gq = Tensor::empty({bh, n, d}, DType::bf16, Device::cuda(0));
      const Tensor gk = Tensor::empty({bh, n, d}, DType::bf16, Device::cuda(0));
      const Tensor gv = Tensor::empty({bh, n, d}, DType::bf16, Device::cuda(0));
      auto p = [](const Tensor& t) { return static_cast<bf16*>(t.raw_data()); };
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      const CudaStream s = current_stream(0);
      const double fwd_flops = 4.0 * bh * n * n * d;
      const int iters = n >= 16384 ? 2 : quick ? 3 : 5;
      const double fwd_ms = median_ms(
          [&] {
            kernels::cuda::attention_forward<bf16>(bh, n, n, d, d, scale, p(q), p(k), p(v), p(out),
                                                   lse.data<float>(), s);
          },
          1, iters);
      row("attention", "forward", "bf16", shape, fwd_ms, fwd_flops, peaks.bf16);
      const double bwd_ms = median_ms(
          [&] {
            kernels::cuda::attention_backward<bf16>(bh, n, n, d, d, scale, p(q), p(k), p(v), p(out),
                                                    lse.data<float>(), p(go), nullptr, p(gq), p(gk), p(gv), s);
          },
          1, iters);
      row("attention", "backward", "bf16", shape, bwd_ms, 2.5 * fwd_flops, peaks.bf16);
    }
  }
}

// A whole training step (forward, backward, AdamW update with clipping) of ViT-S and FLARE on cuda:0, eager and
// replayed from one CUDA graph (optim/captured_step.h). ViT-S is the bench-models workload (128^2 images, patch 8
// -> 256 tokens, E 384, 6 heads, depth 6); FLARE is bench-models' Darcy 85^2 configuration (7,225 points, 4
// layers, 128 hidden, 8 heads, 64 slices). f32 (see the header comment for bf16).
struct ModelBench {
  const char* name;
  const char* kind;
  const char* config;
  std::vector<std::pair<std::string, Shape>> inputs;
  double tokens;
  // Training flops besides 6 per parameter per token (forward 2, backward 4): the attention matmuls, 12 M N E
  // per layer for M queries against N keys of width E (2 GEMMs, forward and twice that backward).
  double attention_flops;
};

void bench_model_step(const ModelBench& mb, bool quick, const Peaks& peaks) {
  const Device dev = Device::cuda(0);
  auto model = models::build_model(mb.kind, models::Json::parse(mb.config), {DType::f32, 0});
  model->to(dev);
  const Mesh mesh(MPI_COMM_SELF, 1, 1);
  optim::OptimizerConfig oc;
  oc.adamw.lr = 1e-4;
  oc.max_grad_norm = 1.0;
  optim::Optimizer opt(mesh, *model, oc);
  std::map<std::string, ShardTensor> inputs;
  uint64_t seed = 11;
  for (const auto& [name, shape] : mb.inputs)
    inputs[name] = distribute(device_randn(shape, DType::f32, seed++), mesh, model->input_placements(name, shape, mesh));
  Tensor target;
  const Tensor loss_seed = ones({}, {DType::f32, dev});
  auto forward_backward = [&] {
    const Tensor y = model->forward(inputs).at(0).local();
    if (!target.defined()) target = device_randn(y.shape(), DType::f32, 99);
    const Tensor loss = mse_loss(y, target);
    backward({loss}, {loss_seed});
    return loss;
  };
  const double params = static_cast<double>(model->num_parameters());
  const double flops = 6 * params * mb.tokens + mb.attention_flops;
  const int iters = quick ? 5 : 20;
  auto report = [&](const char* how, double ms) {
    char extra[200];
    std::snprintf(extra, sizeof extra, "%s tokens_per_s=%.0f peak_bytes=%lld params=%.0f", how, mb.tokens / (ms * 1e-3),
                  static_cast<long long>(memory_stats(dev).peak_bytes), params);
    row("models", mb.name, "f32", "B=1 tokens=" + std::to_string(static_cast<long long>(mb.tokens)), ms, flops,
        peaks.f32, extra);
  };
  allocator_for(dev).reset_peak();
  report("eager", median_ms([&] { forward_backward(); opt.step(); }, 2, iters));
  // The graph: captured after the eager warm-up above, replayed for as many steps as were planned.
  allocator_for(dev).reset_peak();
  optim::CapturedStep step(opt, forward_backward, 2 + iters);
  report("graph", median_ms([&] { step.replay(); }, 2, iters));
  step.check();
}

void bench_models(bool quick, const Peaks& peaks) {
  const std::vector<ModelBench> benches = {
      {"vit_s_train", "vit",
       R"({"img_size": [128, 128], "patch_size": 8, "in_channels": 3, "num_classes": 10, "embed_dim": 384,
           "num_heads": 6, "depth": 6})",
       {{"x", {1, 3, 128, 128}}}, 256, 12.0 * 6 * 256 * 256 * 384},
      {"flare_train", "flare",
       R"({"functional_dim": 1, "out_dim": 1, "embedding_dim": 2, "n_layers": 4, "n_hidden": 128, "n_head": 8,
           "mlp_ratio": 4, "slice_num": 64, "structured_shape": [85, 85]})",
       {{"fx", {1, 7225, 1}}, {"embedding", {1, 7225, 2}}}, 7225, 2 * 12.0 * 4 * 64 * 7225 * 128},
  };
  for (const ModelBench& mb : benches) {
    try {
      bench_model_step(mb, quick, peaks);
    } catch (const std::exception& e) {
      failed_row("models", mb.name, e.what());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardrt-bench-gpu: GEMM, attention and model-step throughput on cuda:0 (CSV on stdout)"};
  bool quick = false;
  std::string sections = "gemm,attention,models";
  Peaks peaks;
  app.add_flag("--quick", quick, "fewer sizes and iterations");
  app.add_option("--sections", sections, "comma-separated: gemm, attention, models");
  app.add_option("--peak-tflops-f32", peaks.f32, "f32 (non-tensor-core) peak TFLOP/s of the device");
  app.add_option("--peak-tflops-tf32", peaks.tf32, "dense TF32 tensor-core peak TFLOP/s");
  app.add_option("--peak-tflops-bf16", peaks.bf16, "dense bf16 tensor-core peak TFLOP/s");
  CLI11_PARSE(app, argc, argv);
  if (!cuda_available()) {
    std::printf("no GPU: skipped\n");
    return 0;
  }
  MPI_Init(&argc, &argv);
  std::printf("section,name,dtype,shape,ms,tflops,peak_tflops,percent_of_peak,extra\n");
  int status = 0;
  auto run = [&](const char* section, void (*fn)(bool, const Peaks&)) {
    if (sections.find(section) == std::string::npos) return;
    try {
      fn(quick, peaks);
    } catch (const std::exception& e) {
      failed_row(section, "all", e.what());
      status = 1;
    }
  };
  run("gemm", bench_gemm);
  run("attention", bench_attention);
  run("models", bench_models);
  MPI_Finalize();
  return status;
}
