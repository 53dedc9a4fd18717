// shardrt-bench-cpu: one CPU workload of issue 10 in ShardRT, timed; tools/bench-cpu runs it in alternating fresh
// processes next to tools/bench_cpu_torch.py (the same workload in PyTorch) and prints the table.
// Inputs are deterministic and identical on both sides, without an RNG: element i (row-major) of input number
// `seed` is sin(0.37 i + seed) * scale, computed in double and cast to f32 (the model-like rows add a quadratic
// phase, see mixed_input); grad_output is cos(0.11 i).
// Prints one line:
//   bench-cpu impl=shardrt workload=W threads=N reps=R min_ms=.. median_ms=.. cpu_min_ms=.. cpu_median_ms=..
//   checksum=s,q;s,q;... bytes=B blas=openmp simd=AVX3
// (cpu_*: the process's CPU time per step, all threads together: on a machine shared with other jobs it is the
// steadier figure, since time spent waiting for a core is not counted) with the sum and the sum of squares of the output and then of each input's grad (fwdbwd only), the least bytes
// a memory-bound workload must move (0 for the others), and what the kernels ran on. With --bandwidth it
// measures the machine's memory bandwidth instead (STREAM-style copy and triad) and prints
//   bench-cpu-bandwidth threads=N copy_gbs=.. triad_gbs=..
#include <cblas.h>
#include <omp.h>
#include <time.h>

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
#include "kernels/cpu/cpu_info.h"
#include "runtime/factories.h"

using namespace shardrt;

namespace {

Tensor input(const Shape& shape, int seed, double scale, double offset = 0.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = offset + std::sin(0.37 * static_cast<double>(i) + seed) * scale;
  return from_vector(v, shape);
}

// Element i is offset + sin(0.37 i + 0.001 i² + seed) * scale (bench_cpu_torch.py's mixed_data). The quadratic
// phase gives every row of a matrix its own frequency: input()'s single frequency makes every matrix rank 2, and
// a stack of blocks built from rank-2 weights is so ill-conditioned that f32 round-off alone moves its grads by 1e-2.
Tensor mixed_input(const Shape& shape, int seed, double scale, double offset = 0.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    const double di = static_cast<double>(i);
    v[i] = offset + std::sin(0.37 * di + 0.001 * (di * di) + seed) * scale;
  }
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
  // Memory-bound workloads: the f32 tensors of `elements` elements the forward reads and writes (x in, y out:
  // 2) and the backward adds (x or y and grad_output in, grad_input out: 3), parameters and statistics left out.
  // Bytes moved = tensors * elements * 4, counted as STREAM counts its arrays (no write-allocate traffic).
  int64_t elements = 0;
};

// Least bytes `w` moves in a step (0 when it is not memory-bound).
double bytes_moved(const Workload& w, bool bwd) { return 4.0 * static_cast<double>(w.elements) * (bwd ? 5 : 2); }

// STREAM-style bandwidth over arrays far larger than the caches (3 x 128 MiB against a 32 MiB L3 here): copy
// (a = b, 2 arrays of traffic) and triad (a = b + s c, 3), each the best of 5 sweeps, on the OpenMP threads the
// workloads use, with the pages first touched by the thread that later sweeps them.
void print_bandwidth(int threads) {
  const int64_t n = int64_t{1} << 25;
  float* a = new float[n];
  float* b = new float[n];
  float* c = new float[n];
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
  auto best_gbs = [&](double arrays, auto sweep) {
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      sweep();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, arrays * 4.0 * static_cast<double>(n) / s / 1e9);
    }
    return best;
  };
  const double copy = best_gbs(2, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i];
  });
  const double triad = best_gbs(3, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 0.5f * c[i];
  });
  volatile float sink = a[n / 2];  // keeps the sweeps
  (void)sink;
  delete[] a;
  delete[] b;
  delete[] c;
  std::printf("bench-cpu-bandwidth threads=%d copy_gbs=%.2f triad_gbs=%.2f\n", threads, copy, triad);
}

// A stack of pre-norm transformer blocks, as in ViT-S: x += proj(SDPA(qkv(LN(x)))); x += fc2(GELU(fc1(LN(x)))).
// inputs[0] is x (1, tokens, E); then 12 parameters per block in this order: ln1 weight, ln1 bias, qkv weight
// (3E, E), qkv bias, proj weight (E, E), proj bias, ln2 weight, ln2 bias, fc1 weight (4E, E), fc1 bias, fc2
// weight (E, 4E), fc2 bias. Input number s + 1 is parameter s (bench_cpu_torch.py builds the same list).
Workload transformer_stack(int64_t blocks, int64_t tokens, int64_t E, int64_t heads) {
  const int64_t hidden = 4 * E, head_dim = E / heads;
  std::vector<Tensor> in{mixed_input({1, tokens, E}, 1, 1.0)};
  int seed = 2;
  auto param = [&](const Shape& shape, double scale, double offset = 0.0) {
    in.push_back(mixed_input(shape, seed++, scale, offset));
  };
  for (int64_t b = 0; b < blocks; ++b) {
    param({E}, 0.1, 1.0), param({E}, 0.1);
    param({3 * E, E}, 1.0 / std::sqrt(double(E))), param({3 * E}, 0.02);
    param({E, E}, 1.0 / std::sqrt(double(E))), param({E}, 0.02);
    param({E}, 0.1, 1.0), param({E}, 0.1);
    param({hidden, E}, 1.0 / std::sqrt(double(E))), param({hidden}, 0.02);
    param({E, hidden}, 1.0 / std::sqrt(double(hidden))), param({E}, 0.02);
  }
  const double scale = 1.0 / std::sqrt(double(head_dim));
  auto forward = [=](const std::vector<Tensor>& p) {
    Tensor x = p[0];
    for (int64_t b = 0; b < blocks; ++b) {
      const Tensor* w = p.data() + 1 + 12 * b;
      // (1, N, 3E) -> (3, 1, H, N, D): q, k, v per head.
      const Tensor qkv = permute(reshape(linear(layer_norm(x, {E}, w[0], w[1]), w[2], w[3]),
                                         {1, tokens, 3, heads, head_dim}),
                                 {2, 0, 3, 1, 4});
      const Tensor attn = scaled_dot_product_attention(select(qkv, 0, 0), select(qkv, 0, 1), select(qkv, 0, 2),
                                                       scale)
                              .out;
      x = add(x, linear(reshape(transpose(attn, 1, 2), {1, tokens, E}), w[4], w[5]));
      x = add(x, linear(gelu(linear(layer_norm(x, {E}, w[6], w[7]), w[8], w[9])), w[10], w[11]));
    }
    return x;
  };
  return {in, forward};
}

Workload make(const std::string& op) {
  if (op == "matmul")
    return {{input({1024, 1024}, 1, 1.0), input({1024, 1024}, 2, 1.0)},
            [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); }};
  if (op == "layer_norm")
    return {{input({4096, 384}, 1, 2.0, 0.5), input({384}, 2, 0.1, 1.0), input({384}, 3, 0.1)},
            [](const std::vector<Tensor>& x) { return layer_norm(x[0], {384}, x[1], x[2]); },
            4096 * 384};
  if (op == "gelu")
    return {{input({8, 4096, 128}, 1, 3.0)}, [](const std::vector<Tensor>& x) { return gelu(x[0]); },
            8 * 4096 * 128};
  // Softmax over the last dim of the layer_norm shape: the row length of a ViT-S token's features, rows many
  // enough to split over threads; scale 4 spreads the row so its max shift and sum matter.
  if (op == "softmax")
    return {{input({4096, 384}, 1, 4.0)}, [](const std::vector<Tensor>& x) { return softmax(x[0], -1); },
            4096 * 384};
  if (op == "attention_n256" || op == "attention_n4096") {
    const int64_t h = op == "attention_n256" ? 6 : 1, n = op == "attention_n256" ? 256 : 4096;
    return {{input({1, h, n, 64}, 1, 1.0), input({1, h, n, 64}, 2, 1.0), input({1, h, n, 64}, 3, 1.0)},
            [](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], 0.125).out; }};
  }
  if (op == "conv2d")
    return {{input({1, 64, 128, 128}, 1, 1.0), input({64, 64, 3, 3}, 2, 1.0 / 24), input({64}, 3, 0.1)},
            [](const std::vector<Tensor>& x) { return conv2d(x[0], x[1], x[2], 1, 1); }};
  if (op == "vit_s_blocks") return transformer_stack(6, 256, 384, 6);
  if (op == "attn_stack_7225") return transformer_stack(4, 7225, 128, 8);
  throw CLI::ValidationError("--workload", "unknown workload " + op);
}

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
  bool bandwidth = false;
  app.add_option("--workload", workload,
                 "matmul|layer_norm|gelu|softmax|attention_n256|attention_n4096|conv2d|vit_s_blocks|attn_stack_7225"
                 " + _fwd|_fwdbwd");
  app.add_flag("--bandwidth", bandwidth, "measure the memory bandwidth (copy, triad) instead of a workload");
  app.add_option("--threads", threads, "OpenMP and OpenBLAS threads")->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  if (bandwidth) {
    print_bandwidth(threads);
    return 0;
  }
  if (workload.empty()) {
    std::fprintf(stderr, "--workload or --bandwidth is required\n");
    return 2;
  }

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
  std::vector<double> ms, cpu;
  for (int r = 0; r < reps; ++r) {
    const double c0 = process_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(process_cpu_ms() - c0);
  }
  std::string checksum = sums(out);
  if (bwd)
    for (const Tensor& t : w.inputs) checksum += ";" + sums(grad_of(t));
  const kernels::cpu::CpuInfo info = kernels::cpu::cpu_info();
  std::printf("bench-cpu impl=shardrt workload=%s threads=%d reps=%d min_ms=%.4f median_ms=%.4f cpu_min_ms=%.4f "
              "cpu_median_ms=%.4f checksum=%s bytes=%.0f blas=%s simd=%s\n",
              workload.c_str(), threads, reps, *std::min_element(ms.begin(), ms.end()), median_of(ms),
              *std::min_element(cpu.begin(), cpu.end()), median_of(cpu), checksum.c_str(), bytes_moved(w, bwd),
              info.blas_threading.c_str(), info.simd_target.c_str());
  return 0;
}
