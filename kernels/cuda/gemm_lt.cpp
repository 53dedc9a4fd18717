#include "kernels/cuda/gemm_lt.h"

#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/cuda/stream.h"
#include "runtime/cuda/stream_scratch.h"
#include "runtime/errors.h"

namespace shardrt::kernels::cuda {
namespace {

// Workspace offered to cuBLASLt's heuristic; Hopper's fastest kernels for large shapes want tens of MiB.
constexpr std::size_t kLtWorkspaceBytes = std::size_t{32} << 20;

struct LtProblem {
  DType dtype;
  bool trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc;
  LtEpilogue epilogue;
  std::string str() const {
    return detail::concat(dtype_name(dtype), " M=", M, " N=", N, " K=", K, " trans_a=", trans_a, " trans_b=",
                          trans_b, " lda=", lda, " ldb=", ldb, " ldc=", ldc, " epilogue=", static_cast<int>(epilogue));
  }
};

void check_lt(cublasStatus_t status, const char* call, const LtProblem& p) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw CudaError(detail::concat("gemm_lt: ", call, " failed with ", cublasGetStatusName(status), " for ", p.str()));
  }
}

// One cuBLASLt handle per device, created on first use and never destroyed (the runtime may be gone at exit).
// A cuBLASLt handle holds no stream or workspace, so it is shared by all threads and streams without a lock.
cublasLtHandle_t lt_handle(const LtProblem& p) {
  struct Slot {
    std::once_flag created;
    cublasLtHandle_t handle = nullptr;
  };
  static const auto* const slots = [] {
    auto* s = new std::vector<std::unique_ptr<Slot>>();
    for (int d = 0; d < cuda_device_count(); ++d) s->push_back(std::make_unique<Slot>());
    return s;
  }();
  int device = -1;
  SHARDRT_CUDA_CHECK(cudaGetDevice(&device));
  SHARDRT_CHECK(device >= 0 && device < static_cast<int>(slots->size()), DeviceError, "gemm_lt: current device cuda:",
                device, " is not one of the ", slots->size(), " usable CUDA device(s)");
  Slot& slot = *(*slots)[device];
  std::call_once(slot.created, [&] { check_lt(cublasLtCreate(&slot.handle), "cublasLtCreate", p); });
  return slot.handle;
}

struct LtTypes {
  cudaDataType_t storage;
  cublasComputeType_t compute;
  cudaDataType_t scalar;
};

LtTypes lt_types(DType dtype, bool allow_tf32) {
  switch (dtype) {
    case DType::f64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    case DType::f32:
      return {CUDA_R_32F, allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::bf16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::f16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    default:
      throw DTypeError(detail::concat("gemm_lt: supports f64, f32, bf16 and f16 on cuda, got ", dtype_name(dtype)));
  }
}

// Owners of the cuBLASLt descriptors of one call, destroyed on every path out.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The largest power of two up to 256 that divides the address: cuBLASLt's heuristic assumes 256-byte aligned
// buffers unless told otherwise, and a view into a larger tensor (narrow, an arena slot) may be less aligned.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

}  // namespace

bool gemm_lt(DType dtype, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
             const void* B, int64_t ldb, void* C, int64_t ldc, LtEpilogue epilogue, const void* bias,
             bool allow_tf32, cudaStream_t stream) {
  const LtProblem p{dtype, trans_a, trans_b, M, N, K, lda, ldb, ldc, epilogue};
  const LtTypes types = lt_types(dtype, allow_tf32 && dtype == DType::f32);
  SHARDRT_CHECK(epilogue == LtEpilogue::none || bias, ValueError, "gemm_lt: the bias epilogue needs a bias (",
                p.str(), ")");
  // An empty product has nothing for cuBLASLt to multiply; the caller's plain GEMM handles those shapes.
  if (M == 0 || N == 0 || K == 0) return false;
  const cublasLtHandle_t handle = lt_handle(p);

  // Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: cuBLASLt's first operand is B, its second A,
  // its D is N x M with leading dimension ldc, and a bias over D's rows is one value per column of our C.
  LtDescriptors d;
  check_lt(cublasLtMatmulDescCreate(&d.op, types.compute, types.scalar), "cublasLtMatmulDescCreate", p);
  const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)),
           "cublasLtMatmulDescSetAttribute(TRANSA)", p);
  check_lt(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)),
           "cublasLtMatmulDescSetAttribute(TRANSB)", p);
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (epilogue == LtEpilogue::bias) epi = CUBLASLT_EPILOGUE_BIAS;
  if (epilogue == LtEpilogue::bias_gelu_tanh) epi = CUBLASLT_EPILOGUE_GELU_BIAS;
  check_lt(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
           "cublasLtMatmulDescSetAttribute(EPILOGUE)", p);
  if (epilogue != LtEpilogue::none) {
    check_lt(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
             "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", p);
    check_lt(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &types.storage,
                                            sizeof(types.storage)),
             "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)", p);
  }
  // Column-major shapes (rows, cols, ld) of the stored matrices: B is N x K (or K x N transposed), A is K x M.
  const uint64_t b_rows = trans_b ? K : N, b_cols = trans_b ? N : K;
  const uint64_t a_rows = trans_a ? M : K, a_cols = trans_a ? K : M;
  check_lt(cublasLtMatrixLayoutCreate(&d.b, types.storage, b_rows, b_cols, ldb), "cublasLtMatrixLayoutCreate(B)", p);
  check_lt(cublasLtMatrixLayoutCreate(&d.a, types.storage, a_rows, a_cols, lda), "cublasLtMatrixLayoutCreate(A)", p);
  check_lt(cublasLtMatrixLayoutCreate(&d.c, types.storage, N, M, ldc), "cublasLtMatrixLayoutCreate(C)", p);

  check_lt(cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate", p);
  const uint64_t workspace_bytes = kLtWorkspaceBytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                sizeof(workspace_bytes)),
           "cublasLtMatmulPreferenceSetAttribute", p);
  // cuBLASLt's first operand is our B, its second our A; C and D are both C.
  const uint32_t align[4] = {alignment_of(B), alignment_of(A), alignment_of(C), alignment_of(C)};
  const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    check_lt(cublasLtMatmulPreferenceSetAttribute(d.pref, align_attr[i], &align[i], sizeof(align[i])),
             "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)", p);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t heuristic =
      cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.b, d.a, d.c, d.c, d.pref, 1, &result, &found);
  if (heuristic == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) return false;
  check_lt(heuristic, "cublasLtMatmulAlgoGetHeuristic", p);

  StreamScratch workspace(result.workspaceSize > 0 ? result.workspaceSize : 1, stream);
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const void* alpha = types.scalar == CUDA_R_64F ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = types.scalar == CUDA_R_64F ? static_cast<const void*>(&zero_d) : &zero_f;
  check_lt(cublasLtMatmul(handle, d.op, alpha, B, d.b, A, d.a, beta, C, d.c, C, d.c, &result.algo,
                          workspace.as<void>(), result.workspaceSize, stream),
           "cublasLtMatmul", p);
  return true;
}

}  // namespace shardrt::kernels::cuda
