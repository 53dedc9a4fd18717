// kernels/cuda/gemm and gemm_lt: what the op-level parity table cannot reach. Padded leading dimensions, alpha and beta
// (beta == 0 dropping NaN in C), batched entries with gaps and a shared operand, bf16 and f16 matrices, and
// empty products, against the fp64 triple loop. Skipped, with a warning, without a CUDA device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_lt.h"
#include "runtime/cuda_context.h"
#include "runtime/half.h"
#include "tests/kernels/cuda_testing.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/support/cuda_skip.h"

namespace cu = shardrt::kernels::cuda;
using shardrt::DType;
using namespace shardrt::test;

namespace {

struct GemmDims {
  int64_t M, N, K;
};

// Leading dimensions padded past the minimum, so a kernel that assumes lda == K (or ldc == N) fails.
struct GemmLayout {
  int64_t lda, ldb, ldc, a_size, b_size, c_size;
  GemmLayout(const GemmDims& d, bool ta, bool tb)
      : lda((ta ? d.M : d.K) + 3),
        ldb((tb ? d.K : d.N) + 2),
        ldc(d.N + 1),
        a_size((ta ? d.K : d.M) * lda),
        b_size((tb ? d.N : d.K) * ldb),
        c_size(d.M * ldc) {}
};

// A and B hold values in [-1, 1], so |C| <= alpha K + |beta|; the absolute tolerance scales with that bound.
double gemm_atol(double rel, int64_t K) { return rel * static_cast<double>(K + 1); }

// ---- 16-bit helpers ----

uint16_t to_half_bits(DType t, double v) {
  const float f = static_cast<float>(v);
  return t == DType::bf16 ? shardrt::float_to_bf16(f).bits : shardrt::float_to_f16(f).bits;
}
double from_half_bits(DType t, uint16_t bits) {
  return t == DType::bf16 ? shardrt::bf16_to_float(shardrt::bf16{bits}) : shardrt::f16_to_float(shardrt::f16{bits});
}
std::vector<uint16_t> to_half(DType t, const Vec& v) {
  std::vector<uint16_t> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_half_bits(t, v[i]);
  return out;
}
Vec from_half(DType t, const std::vector<uint16_t>& v) {
  Vec out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_half_bits(t, v[i]);
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("cuda gemm: f32 and f64 against a host triple loop", "[cuda][kernels]", float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  uint64_t seed = 1;
  for (const GemmDims d : {GemmDims{1, 1, 1}, GemmDims{7, 33, 5}, GemmDims{33, 7, 64}, GemmDims{65, 63, 127}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (double beta : {0.0, -0.3}) {
          const GemmLayout l(d, ta, tb);
          const Vec A = rounded<T>(random_vec(l.a_size, -1, 1, ++seed));
          const Vec B = rounded<T>(random_vec(l.b_size, -1, 1, ++seed));
          // With beta == 0, C starts as NaN: BLAS semantics overwrite it without reading. The padding past N in
          // each row must come back untouched either way.
          const Vec C0 = beta == 0.0 ? Vec(l.c_size, kNaN) : rounded<T>(random_vec(l.c_size, -1, 1, ++seed));
          DeviceBuffer<T> a(cast<T>(A)), b(cast<T>(B)), c(cast<T>(C0));
          cu::gemm(dtype_of_v<T>, ta, tb, d.M, d.N, d.K, 0.7, a.get(), l.lda, b.get(), l.ldb, beta, c.get(), l.ldc,
                   stream());
          Vec want = C0;
          ref_gemm(ta, tb, d.M, d.N, d.K, 0.7, A.data(), l.lda, B.data(), l.ldb, beta, want.data(), l.ldc);
          INFO("M=" << d.M << " N=" << d.N << " K=" << d.K << " ta=" << ta << " tb=" << tb << " beta=" << beta);
          expect_close(widen(c.download()), want, tol<T>(), gemm_atol(tol<T>(), d.K));
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("cuda gemm_strided_batched: per-entry products, stride 0 shares an operand", "[cuda][kernels]",
                   float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  const GemmDims d{7, 33, 17};
  const int64_t batch = 3;
  uint64_t seed = 100;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (bool share_a : {true, false}) {
        const GemmLayout l(d, ta, tb);
        // One operand is shared (stride 0); the other and C have gaps between entries.
        const int64_t stride_a = share_a ? 0 : l.a_size + 5;
        const int64_t stride_b = share_a ? l.b_size + 4 : 0;
        const int64_t stride_c = l.c_size + 3;
        const Vec A = rounded<T>(random_vec(share_a ? l.a_size : batch * stride_a, -1, 1, ++seed));
        const Vec B = rounded<T>(random_vec(share_a ? batch * stride_b : l.b_size, -1, 1, ++seed));
        const Vec C0 = rounded<T>(random_vec(batch * stride_c, -1, 1, ++seed));
        DeviceBuffer<T> a(cast<T>(A)), b(cast<T>(B)), c(cast<T>(C0));
        cu::gemm_strided_batched(dtype_of_v<T>, ta, tb, d.M, d.N, d.K, -1.25, a.get(), l.lda, b.get(), l.ldb, 0.5,
                                 c.get(), l.ldc, batch, stride_a, stride_b, stride_c, stream());
        Vec want = C0;
        for (int64_t i = 0; i < batch; ++i) {
          ref_gemm(ta, tb, d.M, d.N, d.K, -1.25, A.data() + i * stride_a, l.lda, B.data() + i * stride_b, l.ldb, 0.5,
                   want.data() + i * stride_c, l.ldc);
        }
        INFO("ta=" << ta << " tb=" << tb << " share_a=" << share_a);
        expect_close(widen(c.download()), want, tol<T>(), gemm_atol(tol<T>(), d.K) * 2);
      }
    }
  }
}

TEST_CASE("cuda gemm: bf16 and f16 read 16-bit matrices and accumulate in f32", "[cuda][kernels]") {
  if (skip_without_cuda()) return;
  const GemmDims d{33, 17, 64};
  uint64_t seed = 200;
  for (DType t : {DType::bf16, DType::f16}) {
    // Half an ulp of the output format, relative, plus f32 accumulation error.
    const double rel = t == DType::bf16 ? 8e-3 : 1e-3;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const GemmLayout l(d, ta, tb);
        const int64_t batch = ta == tb ? 2 : 1;  // two of the layouts also run batched
        const Vec A = from_half(t, to_half(t, random_vec(l.a_size, -1, 1, ++seed)));
        const Vec B = from_half(t, to_half(t, random_vec(batch * l.b_size, -1, 1, ++seed)));
        const Vec C0 = from_half(t, to_half(t, random_vec(batch * l.c_size, -1, 1, ++seed)));
        DeviceBuffer<uint16_t> a(to_half(t, A)), b(to_half(t, B)), c(to_half(t, C0));
        if (batch == 1) {
          cu::gemm(t, ta, tb, d.M, d.N, d.K, 0.5, a.get(), l.lda, b.get(), l.ldb, 0.25, c.get(), l.ldc, stream());
        } else {
          cu::gemm_strided_batched(t, ta, tb, d.M, d.N, d.K, 0.5, a.get(), l.lda, b.get(), l.ldb, 0.25, c.get(),
                                   l.ldc, batch, 0, l.b_size, l.c_size, stream());
        }
        Vec want = C0;
        for (int64_t i = 0; i < batch; ++i) {
          ref_gemm(ta, tb, d.M, d.N, d.K, 0.5, A.data(), l.lda, B.data() + i * l.b_size, l.ldb, 0.25,
                   want.data() + i * l.c_size, l.ldc);
        }
        INFO(shardrt::dtype_name(t) << " ta=" << ta << " tb=" << tb << " batch=" << batch);
        expect_close(from_half(t, c.download()), want, rel, rel);
      }
    }
  }
}

TEST_CASE("cuda gemm: empty products scale C by beta, empty outputs touch nothing", "[cuda][kernels]") {
  if (skip_without_cuda()) return;
  const int64_t M = 3, N = 4, ldc = 6;
  for (DType t : {DType::f32, DType::f64, DType::bf16}) {
    for (double beta : {0.0, 2.0, 1.0}) {
      for (int64_t batch : {1, 2}) {
        INFO(shardrt::dtype_name(t) << " beta=" << beta << " batch=" << batch);
        const int64_t stride_c = M * ldc + 1;
        const int64_t size = batch * stride_c;
        Vec c0 = random_vec(size, -2, 2, 7);
        if (beta == 0.0) {  // beta == 0 must drop NaN in C; the padding keeps its NaN
          for (double& v : c0) v = kNaN;
        }
        Vec want = c0;
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j) {
              double& w = want[b * stride_c + i * ldc + j];
              w = beta == 0.0 ? 0.0 : beta * w;
            }
          }
        }
        // A and B are never read when K == 0, so null pointers must do.
        auto run = [&](void* c) {
          if (batch == 1) {
            cu::gemm(t, false, false, M, N, 0, 1.0, nullptr, 1, nullptr, N, beta, c, ldc, stream());
          } else {
            cu::gemm_strided_batched(t, true, false, M, N, 0, 1.0, nullptr, M, nullptr, N, beta, c, ldc, batch, 0, 0,
                                     stride_c, stream());
          }
        };
        if (t == DType::bf16) {
          const Vec c_in = from_half(t, to_half(t, c0));
          want = c_in;
          for (int64_t b = 0; b < batch; ++b) {
            for (int64_t i = 0; i < M; ++i) {
              for (int64_t j = 0; j < N; ++j) {
                double& w = want[b * stride_c + i * ldc + j];
                w = beta == 0.0 ? 0.0 : beta * w;  // doubling is exact in bf16
              }
            }
          }
          DeviceBuffer<uint16_t> c(to_half(t, c_in));
          run(c.get());
          expect_close(from_half(t, c.download()), want, 0, 0);
        } else if (t == DType::f32) {
          DeviceBuffer<float> c(cast<float>(c0));
          run(c.get());
          expect_close(widen(c.download()), rounded<float>(want), 0, 0);
        } else {
          DeviceBuffer<double> c(c0);
          run(c.get());
          expect_close(c.download(), want, 0, 0);
        }
      }
    }
  }
  // M == 0 or N == 0: nothing is written, and nothing is read.
  DeviceBuffer<float> sentinel(cast<float>(Vec{1, 2, 3}));
  cu::gemm(DType::f32, false, false, 3, 0, 5, 1.0, nullptr, 5, nullptr, 1, 0.0, sentinel.get(), 1, stream());
  cu::gemm(DType::f32, false, false, 0, 3, 5, 1.0, nullptr, 5, nullptr, 3, 0.0, sentinel.get(), 3, stream());
  cu::gemm_strided_batched(DType::f32, false, false, 1, 3, 5, 1.0, nullptr, 5, nullptr, 3, 0.0, sentinel.get(), 3, 0,
                           0, 0, 0, stream());
  expect_close(widen(sentinel.download()), Vec{1, 2, 3}, 0, 0);
  CHECK_THROWS_AS(cu::gemm(DType::i32, false, false, 1, 1, 1, 1.0, nullptr, 1, nullptr, 1, 0.0, sentinel.get(), 1,
                           stream()),
                  shardrt::DTypeError);
}

TEST_CASE("cuda gemm_lt: bias and bias + tanh-GELU epilogues in f32, bf16 and f16, padded layouts", "[cuda][kernels]") {
  if (skip_without_cuda()) return;
  const GemmDims d{45, 38, 72};
  uint64_t seed = 300;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const double rel = t == DType::bf16 ? 8e-3 : t == DType::f16 ? 1e-3 : 1e-6;
    // f32 buffers hold the same values as f32 bits; the 16-bit ones as their storage bits.
    auto upload = [&](const Vec& v) {
      if (t == DType::f32) return std::vector<uint16_t>();
      return to_half(t, v);
    };
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (cu::LtEpilogue epi : {cu::LtEpilogue::bias, cu::LtEpilogue::bias_gelu_tanh}) {
          const GemmLayout l(d, ta, tb);
          auto round = [&](const Vec& v) { return t == DType::f32 ? rounded<float>(v) : from_half(t, to_half(t, v)); };
          const Vec A = round(random_vec(l.a_size, -1, 1, ++seed));
          const Vec B = round(random_vec(l.b_size, -1, 1, ++seed));
          const Vec bias = round(random_vec(d.N, -1, 1, ++seed));
          Vec want(l.c_size, 0.0);
          ref_gemm(ta, tb, d.M, d.N, d.K, 1.0, A.data(), l.lda, B.data(), l.ldb, 0.0, want.data(), l.ldc);
          for (int64_t i = 0; i < d.M; ++i) {
            for (int64_t j = 0; j < d.N; ++j) {
              double& y = want[i * l.ldc + j];
              y += bias[j];
              if (epi == cu::LtEpilogue::bias_gelu_tanh) {
                y = 0.5 * y * (1 + std::tanh(std::sqrt(2 / M_PI) * (y + 0.044715 * y * y * y)));
              }
            }
          }
          INFO(shardrt::dtype_name(t) << " ta=" << ta << " tb=" << tb << " epilogue=" << static_cast<int>(epi));
          Vec got(l.c_size);
          bool ran = false;
          if (t == DType::f32) {
            DeviceBuffer<float> a(cast<float>(A)), b(cast<float>(B)), bb(cast<float>(bias)), c(l.c_size);
            ran = cu::gemm_lt(t, ta, tb, d.M, d.N, d.K, a.get(), l.lda, b.get(), l.ldb, c.get(), l.ldc, epi,
                              bb.get(), false, stream());
            got = widen(c.download());
          } else {
            DeviceBuffer<uint16_t> a(upload(A)), b(upload(B)), bb(upload(bias)), c(l.c_size);
            ran = cu::gemm_lt(t, ta, tb, d.M, d.N, d.K, a.get(), l.lda, b.get(), l.ldb, c.get(), l.ldc, epi,
                              bb.get(), false, stream());
            got = from_half(t, c.download());
          }
          // Hopper's cuBLASLt has these epilogues for every dtype here: a refusal is a failure, not a skip.
          REQUIRE(ran);
          // Only C's d.N columns of each padded row are compared; the padding is not C's.
          Vec got_c, want_c;
          for (int64_t i = 0; i < d.M; ++i) {
            got_c.insert(got_c.end(), got.begin() + i * l.ldc, got.begin() + i * l.ldc + d.N);
            want_c.insert(want_c.end(), want.begin() + i * l.ldc, want.begin() + i * l.ldc + d.N);
          }
          expect_close(got_c, want_c, rel, gemm_atol(rel, d.K));
        }
      }
    }
  }
}
