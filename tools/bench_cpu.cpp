// shardrt-bench-cpu: one CPU workload of issue 10 in ShardRT, timed; tools/bench-cpu runs it in alternating fresh
// processes next to tools/bench_cpu_torch.py (the same workload in PyTorch) and prints the table.
// Inputs are deterministic and identical on both sides, without an RNG: element i (row-major) of input number
// `seed` is sin(0.37 i + seed) * scale, computed in double and cast to f32; grad_output is cos(0.11 i).
// Prints one line:
//   bench-cpu impl=shardrt workload=W threads=N reps=R min_ms=.. median_ms=.. checksum=s,q;s,q;...
// with the sum and the sum of squares of the output and then of each input's grad (fwdbwd only).
#include <cblas.h>
#include <omp.h>

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
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "runtime/factories.h"

using namespace shardrt;

namespace {

Tensor input(const Shape& shape, int seed, double scale, double offset = 0.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = offset + std::sin(0.37 * static_cast<double>(i) + seed) * scale;
  return from_vector(v, shape);
}

Tensor grad_output(const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::cos(0.11 * static_cast<double>(i));
  return from_vector(v, shape);
}

// One workload: its inputs, the forward op, and whether the timed step also runs backward.
struct Workload {
  std::vector<Tensor> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> forward;
};

Workload make(const std::string& op) {
  if (op == "matmul")
    return {{input({1024, 1024}, 1, 1.0), input({1024, 1024}, 2, 1.0)},
            [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }};
  if (op == "layer_norm")
    return {{input({4096, 384}, 1, 2.0, 0.5), input({384}, 2, 0.1, 1.0), input({384}, 3, 0.1)},
            [](const std::vector<Tensor>& x) { return layer_norm(x[0], {384}, x[1], x[2]); }};
  if (op == "gelu")
    return {{input({8, 4096, 128}, 1, 3.0)}, [](const std::vector<Tensor>& x) { return gelu(x[0]); }};
  if (op == "attention_n256" || op == "attention_n4096") {
    const int64_t h = op == "attention_n256" ? 6 : 1, n = op == "attention_n256" ? 256 : 4096;
    return {{input({1, h, n, 64}, 1, 1.0), input({1, h, n, 64}, 2, 1.0), input({1, h, n, 64}, 3, 1.0)},
            [](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], 0.125).out; }};
  }
  if (op == "conv2d")
    return {{input({1, 64, 128, 128}, 1, 1.0), input({64, 64, 3, 3}, 2, 1.0 / 24), input({64}, 3, 0.1)},
            [](const std::vector<Tensor>& x) { return conv2d(x[0], x[1], x[2], 1, 1); }};
  throw CLI::ValidationError("--workload", "unknown workload " + op);
}

std::string sums(const Tensor& t) {
  const Tensor c = t.contiguous();
  const float* p = c.data<float>();
  double s = 0, q = 0;
  for (int64_t i = 0; i < c.numel(); ++i) s += p[i], q += static_cast<double>(p[i]) * p[i];
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g,%.9g", s, q);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One CPU workload of issue 10 in ShardRT: warm-up + R timed runs, one machine-readable line."};
  std::string workload;
  int threads = 1, reps = 10;
  app.add_option("--workload", workload, "matmul|layer_norm|gelu|attention_n256|attention_n4096|conv2d + _fwd|_fwdbwd")
      ->required();
  app.add_option("--threads", threads, "OpenMP and OpenBLAS threads")->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);

  const size_t cut = workload.rfind('_');
  const std::string mode = cut == std::string::npos ? "" : workload.substr(cut + 1);
  if (mode != "fwd" && mode != "fwdbwd") {
    std::fprintf(stderr, "--workload must end in _fwd or _fwdbwd\n");
    return 2;
  }
  Workload w;
  try {
    w = make(workload.substr(0, cut));
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }
  const bool bwd = mode == "fwdbwd";
  if (bwd)
    for (Tensor& t : w.inputs) set_requires_grad(t);
  Tensor out, gout;
  auto step = [&] {
    out = w.forward(w.inputs);
    if (!bwd) return;
    if (!gout.defined()) gout = grad_output(out.shape());
    for (Tensor& t : w.inputs) zero_grad(t);
    backward(out, gout);
  };
  step();  // warm-up
  step();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
  std::string checksum = sums(out);
  if (bwd)
    for (const Tensor& t : w.inputs) checksum += ";" + sums(grad_of(t));
  std::printf("bench-cpu impl=shardrt workload=%s threads=%d reps=%d min_ms=%.4f median_ms=%.4f checksum=%s\n",
              workload.c_str(), threads, reps, ms.front(), median, checksum.c_str());
  return 0;
}
