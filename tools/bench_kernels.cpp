// shardrt-bench-kernels: CPU kernel throughput, side by side with its reference in one run.
//   GEMM (f32): ShardRT's matmul op next to a bare cblas_sgemm call (OpenBLAS's own figure) and the cores' peak.
//   Attention (f32, forward + backward): ShardRT's blocked attention (never forms N x N) next to the naive
//   composition matmul -> softmax -> matmul on the same tape, with each one's peak bytes.
// Prints markdown tables. Timings are the best of several runs after a warm-up.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "runtime/allocator.h"
#include "runtime/factories.h"

using namespace shardrt;

namespace {

double best_seconds(int reps, const std::function<void()>& fn) {
  fn();  // warm-up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

// Peak f32 FLOP/s of the cores BLAS uses: clock x FLOPs per cycle. x86 cores with FMA and AVX2 issue two
// 8-wide FMAs per cycle (32 f32 FLOPs); the clock is read from /proc/cpuinfo.
struct Peak {
  double gflops = 0;
  std::string how;
};
Peak cpu_peak(int cores) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  double mhz = 0;
  bool fma = false, avx2 = false;
  while (std::getline(f, line)) {
    if (mhz == 0 && line.rfind("cpu MHz", 0) == 0) mhz = std::stod(line.substr(line.find(':') + 1));
    if (line.rfind("flags", 0) == 0) {
      fma = line.find(" fma") != std::string::npos;
      avx2 = line.find(" avx2") != std::string::npos;
    }
  }
  int per_cycle = (fma && avx2) ? 32 : 8;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%d cores x %.0f MHz x %d f32 FLOP/cycle", cores, mhz, per_cycle);
  return {cores * mhz * 1e-3 * per_cycle, buf};
}

void bench_gemm(int threads) {
  Peak peak = cpu_peak(threads);
  std::printf("\n### f32 GEMM, %d thread(s)\n\npeak: %s = %.1f GFLOP/s\n\n", threads, peak.how.c_str(), peak.gflops);
  std::printf("| M=N=K | ShardRT matmul GFLOP/s | OpenBLAS cblas_sgemm GFLOP/s | ShardRT / OpenBLAS | ShardRT / peak |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  Generator gen(1);
  for (int64_t n : {512, 1024, 2048}) {
    Tensor a = randn({n, n}, {DType::f32}, &gen), b = randn({n, n}, {DType::f32}, &gen);
    Tensor c = Tensor::empty({n, n}, DType::f32);
    int reps = n >= 2048 ? 3 : 8;
    double flops = 2.0 * n * n * n;
    double t_ours = best_seconds(reps, [&] { Tensor y = matmul(a, b); });
    double t_blas = best_seconds(reps, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n,
                  0.0f, c.data<float>(), n);
    });
    double g_ours = flops / t_ours * 1e-9, g_blas = flops / t_blas * 1e-9;
    std::printf("| %ld | %.1f | %.1f | %.2f | %.2f |\n", static_cast<long>(n), g_ours, g_blas, g_ours / g_blas,
                g_ours / peak.gflops);
  }
}

// Forward + backward of one attention call; returns seconds and the peak bytes above the inputs.
struct AttnRun {
  double seconds;
  int64_t peak_bytes;
};
AttnRun run_attention(bool naive, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gout, int reps) {
  double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto step = [&] {
    Tensor qq = q, kk = k, vv = v;
    Tensor out = naive ? matmul(softmax(mul_scalar(matmul(qq, transpose(kk, -2, -1)), scale), -1), vv)
                       : scaled_dot_product_attention(qq, kk, vv, scale).out;
    backward(out, gout);
  };
  double t = best_seconds(reps, step);
  MemoryStats before = memory_stats(Device::cpu());
  reset_peak_memory(Device::cpu());
  step();
  return {t, memory_stats(Device::cpu()).peak_bytes - before.current_bytes};
}

void bench_attention() {
  std::printf("\n### Attention forward + backward, f32, B*H = 8, D = 64\n\n");
  std::printf("| N (= Nq = Nk) | ShardRT blocked ms | naive matmul-softmax-matmul ms | speed-up | ShardRT peak MiB | naive peak MiB |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  Generator gen(2);
  for (int64_t n : {256, 1024, 2048}) {
    auto make = [&] {
      Tensor t = randn({8, n, 64}, {DType::f32}, &gen);
      set_requires_grad(t);
      return t;
    };
    Tensor q = make(), k = make(), v = make();
    Tensor gout = randn({8, n, 64}, {DType::f32}, &gen);
    int reps = n >= 2048 ? 2 : 4;
    AttnRun ours = run_attention(false, q, k, v, gout, reps);
    AttnRun naive = run_attention(true, q, k, v, gout, reps);
    std::printf("| %ld | %.1f | %.1f | %.2f | %.1f | %.1f |\n", static_cast<long>(n), ours.seconds * 1e3,
                naive.seconds * 1e3, naive.seconds / ours.seconds, ours.peak_bytes / 1048576.0,
                naive.peak_bytes / 1048576.0);
  }
}

}  // namespace

int main() {
  int threads = openblas_get_num_threads();
  std::printf("## shardrt bench-kernels (CPU)\n\nOpenBLAS: %s, %d thread(s); hardware threads: %u\n", openblas_get_config(),
              threads, std::thread::hardware_concurrency());
  bench_gemm(threads);
  bench_attention();
  return 0;
}
