// Dense matrix multiply on a CUDA device through cuBLAS, with the row-major semantics of kernels/cpu/gemm.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace shardrt::kernels::cuda {

// C = alpha * op(A) * op(B) + beta * C, all row-major, where op(A) is M x K and op(B) is K x N.
// A is M x K (lda >= K) or, with trans_a, K x M (lda >= M); likewise B is K x N or N x K with trans_b; ldc >= N.
// Leading dimensions are in elements. As in BLAS, beta == 0 overwrites C without reading it. M == 0 or N == 0
// does nothing; K == 0 leaves C = beta * C.
// dtype: f32 and f64 compute in their own precision (f32 never uses TF32); bf16 and f16 read and write 16-bit
// matrices and accumulate in f32. alpha and beta are rounded to the compute precision. Any other dtype throws
// DTypeError; a cuBLAS failure throws CudaError naming the status and the shape.
// Runs on the current device, which must own `stream` and the buffers; queued on `stream`, never synchronises.
// Precondition: C does not overlap A or B.
void gemm(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
          int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, cudaStream_t stream);

// `batch` independent gemm calls in one launch; matrix i of each operand starts at (pointer + i * stride), strides
// in elements. A stride of 0 on A or B shares that operand across the batch. The C matrices of different batch
// entries must not overlap.
void gemm_strided_batched(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                          const void* A, int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc,
                          int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c, cudaStream_t stream);

}  // namespace shardrt::kernels::cuda
