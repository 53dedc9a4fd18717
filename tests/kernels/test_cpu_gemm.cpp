// kernels/cpu/gemm: gemm and gemm_batched against the fp64 triple loop, every transpose, padded leading
// dimensions, shared (stride 0) operands and degenerate sizes.
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/cpu/gemm.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEMPLATE_TEST_CASE("gemm matches the reference for every transpose and padded leading dimensions", "[kernels][cpu]",
                   float, double) {
  const double rtol = std::is_same_v<TestType, double> ? 1e-12 : 1e-5;
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 33, 5}, {33, 7, 130}, {130, 1, 7}};
  uint64_t seed = 1;
  for (const auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    for (int trans = 0; trans < 4; ++trans) {
      const bool ta = trans & 1, tb = trans & 2;
      // Leading dimensions padded by 3 so a kernel that assumes packed rows reads the wrong elements.
      const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 3, ldc = N + 3;
      const Vec A = random_vec((ta ? K : M) * lda, -1, 1, seed++);
      const Vec B = random_vec((tb ? N : K) * ldb, -1, 1, seed++);
      const Vec C0 = random_vec(M * ldc, -1, 1, seed++);
      for (double beta : {0.0, 1.0, -0.5}) {
        INFO("M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb << " beta=" << beta);
        auto C = cast<TestType>(C0);
        const auto a = cast<TestType>(A), b = cast<TestType>(B);
        cpu::gemm<TestType>(ta, tb, M, N, K, TestType(1.5), a.data(), lda, b.data(), ldb, TestType(beta), C.data(),
                            ldc);
        // The reference runs on the T-rounded inputs so the float comparison only sees accumulation error.
        const Vec want = ref_gemm(ta, tb, M, N, K, 1.5, Vec(a.begin(), a.end()), lda, Vec(b.begin(), b.end()), ldb,
                                  beta, C0, ldc);
        expect_close(C, want, rtol, rtol);
      }
    }
  }
}

TEST_CASE("gemm degenerate sizes", "[kernels][cpu]") {
  const Vec A = random_vec(64, -1, 1, 11), B = random_vec(64, -1, 1, 12);
  SECTION("K == 0 scales C by beta") {
    Vec C = random_vec(3 * 4, -1, 1, 13);
    const Vec C0 = C;
    cpu::gemm<double>(false, false, 3, 4, 0, 2.0, A.data(), 1, B.data(), 4, 0.5, C.data(), 4);
    Vec want(C0.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * C0[i];
    expect_close(C, want, 0.0);
  }
  SECTION("K == 0 with beta == 0 overwrites C, NaN included") {
    Vec C(3 * 4, kNaN);
    cpu::gemm<double>(true, true, 3, 4, 0, 1.0, A.data(), 3, B.data(), 1, 0.0, C.data(), 4);
    expect_close(C, Vec(12, 0.0), 0.0);
  }
  SECTION("beta == 0 drops NaN already in C") {
    Vec C(2 * 3, kNaN);
    cpu::gemm<double>(false, false, 2, 3, 4, 1.0, A.data(), 4, B.data(), 3, 0.0, C.data(), 3);
    expect_close(C, ref_gemm(false, false, 2, 3, 4, 1.0, A, 4, B, 3, 0.0, Vec(6, 0.0), 3), 1e-14);
  }
  SECTION("alpha == 0 ignores A and B") {
    Vec nan_a(64, kNaN);
    Vec C = random_vec(6, -1, 1, 14);
    const Vec C0 = C;
    cpu::gemm<double>(false, false, 2, 3, 5, 0.0, nan_a.data(), 5, B.data(), 3, 2.0, C.data(), 3);
    Vec want(6);
    for (size_t i = 0; i < 6; ++i) want[i] = 2.0 * C0[i];
    expect_close(C, want, 0.0);
  }
  SECTION("M == 0 or N == 0 leaves C untouched") {
    Vec C(8, 7.0);
    cpu::gemm<double>(false, false, 0, 4, 5, 1.0, A.data(), 5, B.data(), 4, 0.0, C.data(), 4);
    cpu::gemm<double>(false, false, 2, 0, 5, 1.0, A.data(), 5, B.data(), 1, 0.0, C.data(), 1);
    expect_close(C, Vec(8, 7.0), 0.0);
  }
}

TEMPLATE_TEST_CASE("gemm_batched with shared and strided operands", "[kernels][cpu]", float, double) {
  const double rtol = std::is_same_v<TestType, double> ? 1e-12 : 1e-5;
  const int64_t M = 5, N = 7, K = 33, batch = 3;
  for (int shared = 0; shared < 3; ++shared) {
    // shared: 0 none, 1 A shared (stride 0), 2 B shared. Batch strides leave padding between matrices. B is
    // stored transposed (N x K).
    const int64_t stride_a = shared == 1 ? 0 : M * K + 2;
    const int64_t stride_b = shared == 2 ? 0 : N * K + 5;
    const int64_t stride_c = M * N + 1;
    const auto A = cast<TestType>(random_vec(batch * (M * K + 2), -1, 1, 20 + shared));
    const auto B = cast<TestType>(random_vec(batch * (N * K + 5), -1, 1, 30 + shared));
    std::vector<TestType> C(static_cast<size_t>(batch * stride_c), TestType(9));
    cpu::gemm_batched<TestType>(false, true, M, N, K, TestType(1), A.data(), K, B.data(), K, TestType(0), C.data(), N,
                                batch, stride_a, stride_b, stride_c);
    Vec want(C.size(), 9.0);
    for (int64_t i = 0; i < batch; ++i) {
      const Vec a(A.begin() + i * stride_a, A.begin() + i * stride_a + M * K);
      const Vec b(B.begin() + i * stride_b, B.begin() + i * stride_b + N * K);
      const Vec c = ref_gemm(false, true, M, N, K, 1.0, a, K, b, K, 0.0, Vec(M * N, 0.0), N);
      std::copy(c.begin(), c.end(), want.begin() + i * stride_c);
    }
    INFO("shared=" << shared);
    expect_close(C, want, rtol, rtol);
  }
  // An empty batch reads nothing and writes nothing.
  std::vector<TestType> C(4, TestType(3));
  cpu::gemm_batched<TestType>(false, false, 2, 2, 2, TestType(1), nullptr, 2, nullptr, 2, TestType(0), C.data(), 2, 0,
                              4, 4, 4);
  expect_close(C, Vec(4, 3.0), 0.0);
}
