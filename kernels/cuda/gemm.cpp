#include "kernels/cuda/gemm.h"

#include <cublas_v2.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cuda/stream.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"

namespace shardrt::kernels::cuda {
namespace {

// cuBLAS's recommended workspace on Hopper; with less it falls back to slower kernels for some shapes.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

// The cuBLAS state of one device, created on its first GEMM. A handle holds the stream and workspace it runs
// with, so each call sets them under `mutex`: two threads must not interleave their settings on one handle.
struct DeviceBlas {
  std::once_flag created;
  std::mutex mutex;
  cublasHandle_t handle = nullptr;
  // Owned by this device's ShardRT stream only: a workspace shared by two streams could be written by both at
  // once. GEMMs on any other stream use cuBLAS's own workspace.
  cudaStream_t workspace_stream = nullptr;
  void* workspace = nullptr;
};

// The problem as the error messages describe it.
struct GemmShape {
  DType dtype;  // of A and B, and of C unless c_dtype says otherwise
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc, batch, stride_a, stride_b, stride_c;
  std::optional<DType> c_dtype{};  // f32 for the mixed (autocast) GEMM

  DType out_dtype() const { return c_dtype.value_or(dtype); }

  std::string str() const {
    std::string s = detail::concat(dtype_name(dtype), c_dtype ? detail::concat(" -> ", dtype_name(*c_dtype)) : "",
                                   " M=", M, " N=", N, " K=", K, " trans_a=", trans_a,
                                   " trans_b=", trans_b, " lda=", lda, " ldb=", ldb, " ldc=", ldc);
    if (batch != 1) {
      s += detail::concat(" batch=", batch, " stride_a=", stride_a, " stride_b=", stride_b, " stride_c=", stride_c);
    }
    return s;
  }
};

void check_blas(cublasStatus_t status, const char* call, const GemmShape& shape) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw CudaError(detail::concat("gemm: ", call, " failed with ", cublasGetStatusName(status), " for ", shape.str()));
  }
}

// The device's cuBLAS state, set up to run on `stream`. The caller holds the returned lock while it enqueues.
DeviceBlas& blas_for(cudaStream_t stream, std::unique_lock<std::mutex>& lock, const GemmShape& shape) {
  // Never destroyed: at exit the CUDA runtime may be gone before static destructors run.
  static const auto* const table = [] {
    auto* t = new std::vector<std::unique_ptr<DeviceBlas>>();
    for (int d = 0; d < cuda_device_count(); ++d) t->push_back(std::make_unique<DeviceBlas>());
    return t;
  }();
  int device = -1;
  SHARDRT_CUDA_CHECK(cudaGetDevice(&device));
  SHARDRT_CHECK(device >= 0 && device < static_cast<int>(table->size()), DeviceError, "gemm: current device cuda:",
                device, " is not one of the ", table->size(), " usable CUDA device(s)");
  DeviceBlas& blas = *(*table)[device];
  std::call_once(blas.created, [&] {
    check_blas(cublasCreate(&blas.handle), "cublasCreate", shape);
    SHARDRT_CUDA_CHECK(cudaMalloc(&blas.workspace, kWorkspaceBytes));
    blas.workspace_stream = current_stream(device);
  });
  lock = std::unique_lock<std::mutex>(blas.mutex);
  // cublasSetStream also resets the workspace to cuBLAS's default, so ours is set again after it.
  check_blas(cublasSetStream(blas.handle, stream), "cublasSetStream", shape);
  if (stream == blas.workspace_stream) {
    check_blas(cublasSetWorkspace(blas.handle, blas.workspace, kWorkspaceBytes), "cublasSetWorkspace", shape);
  }
  return blas;
}

// How cuBLAS is asked for one dtype: the storage type, the compute type, and alpha/beta in the compute precision.
struct BlasTypes {
  cudaDataType_t storage;
  cublasComputeType_t compute;
  cudaDataType_t scalar;
};

BlasTypes blas_types(DType dtype) {
  switch (dtype) {
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    case DType::f32: return {CUDA_R_32F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    default:
      throw DTypeError(detail::concat("gemm: supports f64, f32, bf16 and f16 on cuda, got ", dtype_name(dtype)));
  }
}

// A host scalar in the precision cuBLAS reads it with (host pointer mode).
struct Scalar {
  double as_double;
  float as_float;
  explicit Scalar(double v) : as_double(v), as_float(static_cast<float>(v)) {}
  const void* ptr(cudaDataType_t type) const {
    return type == CUDA_R_64F ? static_cast<const void*>(&as_double) : static_cast<const void*>(&as_float);
  }
};

// C = beta * C for an empty product (K == 0), where there is nothing for cuBLAS to multiply; `types` are C's.
// beta == 0 writes zero bits (0.0 in every float format) so NaN or garbage in C is dropped, as BLAS does.
void scale_c(cublasHandle_t handle, const BlasTypes& types, const GemmShape& s, double beta, void* C,
             cudaStream_t stream) {
  if (beta == 1.0) return;
  const std::size_t elem = dtype_size(s.out_dtype());
  const Scalar scale(beta);
  for (int64_t b = 0; b < s.batch; ++b) {
    char* c = static_cast<char*>(C) + b * s.stride_c * static_cast<int64_t>(elem);
    if (beta == 0.0) {
      SHARDRT_CUDA_CHECK(cudaMemset2DAsync(c, s.ldc * elem, 0, s.N * elem, s.M, stream));
    } else if (s.ldc == s.N) {  // rows are packed: the matrix is one vector
      check_blas(cublasScalEx_64(handle, s.M * s.N, scale.ptr(types.scalar), types.scalar, c, types.storage, 1,
                                 types.scalar),
                 "cublasScalEx_64", s);
    } else {
      for (int64_t i = 0; i < s.M; ++i) {
        check_blas(cublasScalEx_64(handle, s.N, scale.ptr(types.scalar), types.scalar, c + i * s.ldc * elem,
                                   types.storage, 1, types.scalar),
                   "cublasScalEx_64", s);
      }
    }
  }
}

void run_gemm(const GemmShape& s, double alpha, const void* A, const void* B, double beta, void* C,
              cudaStream_t stream) {
  const BlasTypes types = blas_types(s.dtype);
  // The mixed GEMM writes f32 C from 16-bit A and B; cuBLAS takes that combination with CUBLAS_COMPUTE_32F.
  const BlasTypes c_types = blas_types(s.out_dtype());
  if (s.M == 0 || s.N == 0 || s.batch == 0) return;
  std::unique_lock<std::mutex> lock;
  DeviceBlas& blas = blas_for(stream, lock, s);
  if (s.K == 0) {
    scale_c(blas.handle, c_types, s, beta, C, stream);
    return;
  }
  // cuBLAS is column-major, and a row-major matrix is its transpose seen column-major. So the row-major
  // C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T: B and A swap places, M and N swap,
  // and the transpose flags and leading dimensions carry over unchanged.
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const Scalar a(alpha), b(beta);
  if (s.batch == 1) {
    check_blas(cublasGemmEx_64(blas.handle, op_b, op_a, s.N, s.M, s.K, a.ptr(types.scalar), B, types.storage, s.ldb,
                               A, types.storage, s.lda, b.ptr(types.scalar), C, c_types.storage, s.ldc, types.compute,
                               CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx_64", s);
  } else {
    check_blas(cublasGemmStridedBatchedEx_64(blas.handle, op_b, op_a, s.N, s.M, s.K, a.ptr(types.scalar), B,
                                             types.storage, s.ldb, s.stride_b, A, types.storage, s.lda, s.stride_a,
                                             b.ptr(types.scalar), C, c_types.storage, s.ldc, s.stride_c, s.batch,
                                             types.compute, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx_64", s);
  }
}

}  // namespace

void gemm(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
          int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, cudaStream_t stream) {
  run_gemm({dtype, trans_a, trans_b, M, N, K, lda, ldb, ldc, 1, 0, 0, 0}, alpha, A, B, beta, C, stream);
}

void gemm_strided_batched(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                          const void* A, int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc,
                          int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c, cudaStream_t stream) {
  run_gemm({dtype, trans_a, trans_b, M, N, K, lda, ldb, ldc, batch, stride_a, stride_b, stride_c}, alpha, A, B, beta,
           C, stream);
}

void gemm_strided_batched_mixed(DType operand_dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                double alpha, const void* A, int64_t lda, const void* B, int64_t ldb, double beta,
                                float* C, int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b,
                                int64_t stride_c, cudaStream_t stream) {
  SHARDRT_CHECK(operand_dtype == DType::bf16 || operand_dtype == DType::f16, DTypeError,
                "gemm_strided_batched_mixed: operands must be bf16 or f16 (f32 output), got ",
                dtype_name(operand_dtype));
  run_gemm({operand_dtype, trans_a, trans_b, M, N, K, lda, ldb, ldc, batch, stride_a, stride_b, stride_c, DType::f32},
           alpha, A, B, beta, C, stream);
}

}  // namespace shardrt::kernels::cuda
