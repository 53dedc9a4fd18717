// Dense matrix multiply on the CPU through OpenBLAS (cblas), row-major.
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu {

// C = alpha * op(A) * op(B) + beta * C, all row-major, where op(A) is M x K and op(B) is K x N.
// A is M x K (lda >= K) or, with trans_a, K x M (lda >= M); likewise B is K x N or N x K with trans_b.
// Leading dimensions are in elements. As in BLAS, beta == 0 overwrites C without reading it (NaN in C does not
// survive). M == 0 or N == 0 does nothing; K == 0 leaves C = beta * C without calling BLAS.
// Preconditions (checked by the layer above): every size and leading dimension fits in a 32-bit int, which is
// what this OpenBLAS build takes; C does not overlap A or B.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc);

// `batch` independent gemm calls; matrix i of each operand starts at (pointer + i * stride). A stride of 0 on A or
// B shares that operand across the batch. The C matrices of different batch entries must not overlap
// (stride_c >= the C matrix extent when batch > 1).
template <typename T>
void gemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                  const T* B, int64_t ldb, T beta, T* C, int64_t ldc, int64_t batch, int64_t stride_a,
                  int64_t stride_b, int64_t stride_c);

}  // namespace shardrt::kernels::cpu
