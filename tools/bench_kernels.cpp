// shardrt-bench-kernels: CPU kernel throughput, side by side with its reference in one run.
//   GEMM (f32): ShardRT's matmul op next to a bare cblas_sgemm call (OpenBLAS's own figure) and the cores' peak.
//   Attention (f32, forward + backward): ShardRT's blocked attention (never forms N x N) next to the naive
//   composition matmul -> softmax -> matmul on the same tape, with each one's peak bytes.
// Prints markdown tables. Timings are the best of several runs after a warm-up.
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "kernels/cpu/cpu_info.h"
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

// Peak f32 FLOP/s of the cores, measured rather than looked up: each thread runs a loop of independent FMAs on
// registers (12 accumulators hide the FMA latency), once with 256-bit and, where the CPU has it, 512-bit vectors;
// the faster is the peak. The clock the cores actually run at (turbo, a VM's host) is whatever it is during the
// run, the same clock GEMM gets.
constexpr int kAccumulators = 12;
constexpr long kFmaIterations = 20'000'000;

// FLOP/s of one thread's FMA loop, given the seconds it took with `lanes`-wide vectors.
double fma_rate(int lanes, double seconds) { return 2.0 * lanes * kAccumulators * kFmaIterations / seconds; }

__attribute__((target("avx2,fma"))) double fma256_rate_per_thread() {
  __m256 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_set1_ps(1.0f + 1e-7f * i);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < kFmaIterations; ++it)
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  float sink = 0;
  for (int i = 0; i < kAccumulators; ++i) sink += _mm256_cvtss_f32(acc[i]);
  if (sink == 12345.0f) std::printf(" ");  // keeps the loop from being optimised away
  return fma_rate(8, secs);
}

__attribute__((target("avx512f"))) double fma512_rate_per_thread() {
  __m512 acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-7f * i);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < kFmaIterations; ++it)
    for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  float sink = 0;
  for (int i = 0; i < kAccumulators; ++i) sink += _mm512_cvtss_f32(acc[i]);
  if (sink == 12345.0f) std::printf(" ");
  return fma_rate(16, secs);
}

// Sum over `threads` threads running the per-thread loop at once.
double all_threads(int threads, double (*per_thread)()) {
  double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  total += per_thread();
  return total;
}

struct Peak {
  double avx2_gflops = 0;    // what AVX2 kernels (OpenBLAS under OPENBLAS_CORETYPE=Haswell) can reach
  double avx512_gflops = 0;  // the cores' full width, where they have it
};
Peak cpu_peak(int threads) {
  return {__builtin_cpu_supports("fma") ? all_threads(threads, fma256_rate_per_thread) * 1e-9 : 0,
          __builtin_cpu_supports("avx512f") ? all_threads(threads, fma512_rate_per_thread) * 1e-9 : 0};
}

void bench_gemm(int threads) {
  Peak peak = cpu_peak(threads);
  std::printf("\n### f32 GEMM, %d thread(s)\n\npeak (measured FMA throughput of %d thread(s)): %.1f GFLOP/s with 256-bit "
              "vectors (AVX2), %.1f GFLOP/s with 512-bit vectors (AVX-512; 0 = not supported)\n\n",
              threads, threads, peak.avx2_gflops, peak.avx512_gflops);
  std::printf("| M=N=K | ShardRT matmul GFLOP/s | OpenBLAS cblas_sgemm GFLOP/s | ShardRT / OpenBLAS | ShardRT / AVX2 peak "
              "| ShardRT / AVX-512 peak |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
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
    std::printf("| %ld | %.1f | %.1f | %.2f | %.2f | %.2f |\n", static_cast<long>(n), g_ours, g_blas, g_ours / g_blas,
                g_ours / peak.avx2_gflops, peak.avx512_gflops > 0 ? g_ours / peak.avx512_gflops : 0.0);
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

int main(int argc, char** argv) {
  CLI::App app{"CPU kernel throughput: f32 GEMM next to OpenBLAS and the cores' peak, attention next to naive."};
  CLI11_PARSE(app, argc, argv);
  int threads = openblas_get_num_threads();
  const shardrt::kernels::cpu::CpuInfo info = shardrt::kernels::cpu::cpu_info();
  std::printf("## shardrt bench-kernels (CPU)\n\nOpenBLAS: %s, %d thread(s), %s threading; hardware threads: %u; "
              "vector kernels: %s\n",
              openblas_get_config(), threads, info.blas_threading.c_str(), std::thread::hardware_concurrency(),
              info.simd_target.c_str());
  bench_gemm(threads);
  bench_attention();
  return 0;
}
