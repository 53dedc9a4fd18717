// Dense matrix multiply on a CUDA device through cuBLAS.
// Contract: kernels/cpu/gemm.h (same row-major C = alpha op(A) op(B) + beta C, leading dimensions, beta == 0 and
// empty-size rules; C does not overlap A or B). CUDA: typed by a DType over untyped device pointers instead of a
// template: f32 and f64 compute in their own precision (f32 never uses TF32); bf16 and f16 read and write 16-bit
// matrices and accumulate in f32; alpha and beta are rounded to the compute precision. Any other dtype throws
// DTypeError; a cuBLAS failure throws CudaError naming the status and the shape. Runs on the current device, which
// must own `stream` and the buffers; queued on `stream`, never synchronises.
#pragma once
#include <cstdint>

#include "runtime/cuda_context.h"
#include "runtime/dtype.h"

namespace shardrt::kernels::cuda {

void gemm(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
          int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, CudaStream stream);

// The batched form of kernels/cpu/gemm.h's gemm_batched, strides in elements, in one cuBLAS launch.
void gemm_strided_batched(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                          const void* A, int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc,
                          int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c, CudaStream stream);

// The autocast GEMM (autograd/autocast.h): A and B in `operand_dtype` (bf16 or f16), C in f32, products
// accumulated in f32 (CUBLAS_COMPUTE_32F), alpha and beta in f32. Otherwise as gemm_strided_batched; an operand
// dtype other than bf16/f16 throws DTypeError.
void gemm_strided_batched_mixed(DType operand_dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                double alpha, const void* A, int64_t lda, const void* B, int64_t ldb, double beta,
                                float* C, int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b,
                                int64_t stride_c, CudaStream stream);

}  // namespace shardrt::kernels::cuda
