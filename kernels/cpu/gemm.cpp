#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <mutex>

namespace shardrt::kernels::cpu {
namespace {

// Why the GEMMs are tiled here rather than threaded by OpenBLAS: OpenBLAS splits a product between its threads by
// the thread count, and on some CPUs that changes the last bits of C (seen on AMD EPYC, where it runs its Haswell
// kernels: the ViT's forward differed between 1 and 2 threads, and three AdamW steps turned that into 2e-3 in
// near-zero-grad parameters). So OpenBLAS is kept single-threaded and a large product is cut here into tiles of a
// fixed size, run in parallel: every element of C comes from one single-threaded call over a tile that does not
// depend on the thread count, and neither do the bits (tests/models/test_determinism.cpp asserts it).
constexpr int64_t kTileRows = 128, kTileCols = 256;
// Below this many multiply-adds one call is cheaper than a parallel region.
constexpr int64_t kParallelMacs = int64_t{1} << 21;

// An OpenMP build of OpenBLAS (the one meson.build links) takes its thread count from omp_get_max_threads() at
// every call and runs one thread inside an active parallel region: with_one_openmp_thread below pins it. A pthreads
// build keeps its own count, set once here; in the OpenMP build openblas_set_num_threads would also set the calling
// thread's OpenMP team size, so it is left alone there.
void keep_openblas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (openblas_get_parallel() == 1) openblas_set_num_threads(1);  // 0 sequential, 1 pthreads, 2 OpenMP
  });
}

// Runs f with this thread's OpenMP team size set to 1, restored afterwards.
template <class F>
void with_one_openmp_thread(F f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  f();
  omp_set_num_threads(saved);
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha,
              A, static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, double alpha,
               const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha,
              A, static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

// C = beta * C for the cases where no product contributes; beta == 0 writes zeros so NaN/garbage in C is dropped,
// matching what BLAS does.
template <typename T>
void scale_matrix(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  if (beta == T(1)) return;
  for (int64_t i = 0; i < M; ++i) {
    T* row = C + i * ldc;
    if (beta == T(0)) {
      for (int64_t j = 0; j < N; ++j) row[j] = T(0);
    } else {
      for (int64_t j = 0; j < N; ++j) row[j] *= beta;
    }
  }
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  // Some BLAS builds reject K == 0 (and its leading dimensions, which may then be 0), so the empty product is
  // handled here. alpha == 0 too: the BLAS contract leaves A and B unread then, but OpenBLAS's SkylakeX kernels
  // still multiply them, so a NaN in A or B would reach C as 0 * NaN.
  if (K == 0 || alpha == T(0)) {
    scale_matrix(M, N, beta, C, ldc);
    return;
  }
  keep_openblas_single_threaded();
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  // Tiles over the longer side of C: rows of C are rows of op(A) (A + i0 * lda, or A + i0 when transposed);
  // columns of C are columns of op(B) (B + j0, or B + j0 * ldb when transposed).
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N, tile = by_rows ? kTileRows : kTileCols;
  const int64_t tiles = (extent + tile - 1) / tile;
  auto run_tile = [&](int64_t t) {
    const int64_t lo = t * tile, n = std::min(tile, extent - lo);
    if (by_rows) {
      blas_gemm(ta, tb, n, N, K, alpha, trans_a ? A + lo : A + lo * lda, lda, B, ldb, beta, C + lo * ldc, ldc);
    } else {
      blas_gemm(ta, tb, M, n, K, alpha, A, lda, trans_b ? B + lo * ldb : B + lo, ldb, beta, C + lo, ldc);
    }
  };
  if (tiles > 1 && M * N * K >= kParallelMacs && !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) run_tile(t);  // inside the region OpenBLAS runs one thread per call
  } else {
    with_one_openmp_thread([&] {
      for (int64_t t = 0; t < tiles; ++t) run_tile(t);
    });
  }
}

template <typename T>
void gemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                  const T* B, int64_t ldb, T beta, T* C, int64_t ldc, int64_t batch, int64_t stride_a,
                  int64_t stride_b, int64_t stride_c) {
  // Serial over the batch: each call is tiled over the threads itself (above).
  for (int64_t i = 0; i < batch; ++i) {
    gemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta, C + i * stride_c, ldc);
  }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t);
template void gemm_batched<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                                  int64_t, float, float*, int64_t, int64_t, int64_t, int64_t, int64_t);
template void gemm_batched<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                   const double*, int64_t, double, double*, int64_t, int64_t, int64_t, int64_t,
                                   int64_t);

}  // namespace shardrt::kernels::cpu
