// GEMM with a fused epilogue through cuBLASLt: y = op(A) op(B) + bias, optionally through GELU, in one kernel
// instead of a GEMM plus a pass that adds the bias (and another that applies the activation).
// Contract: kernels/cpu/gemm.h's row-major C = op(A) op(B) with leading dimensions (alpha = 1, beta = 0). CUDA:
// `bias` (N elements, C's dtype, may be null for `none`) is added to every row of C, i.e. one value per output
// feature, as linear's bias; bias_gelu_tanh then applies cuBLASLt's GELU, which is the tanh approximation
// (GeluApprox::tanh), not the erf form. f32 and f64 compute in their own precision unless `allow_tf32` (f32 only);
// bf16 and f16 accumulate in f32. Returns false, having queued nothing, when cuBLASLt offers no algorithm for the
// problem (the caller then runs the plain GEMM); a cuBLASLt failure after that throws CudaError naming the shape.
// Any dtype other than f64/f32/bf16/f16 throws DTypeError. Runs on the current device, which must own `stream`;
// queued on `stream` with stream-ordered workspace, never synchronises.
#pragma once
#include <cstdint>

#include "runtime/cuda_context.h"
#include "runtime/dtype.h"

namespace shardrt::kernels::cuda {

enum class LtEpilogue { none, bias, bias_gelu_tanh };

bool gemm_lt(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
             const void* B, int64_t ldb, void* C, int64_t ldc, LtEpilogue epilogue, const void* bias,
             bool allow_tf32, CudaStream stream);

}  // namespace shardrt::kernels::cuda
