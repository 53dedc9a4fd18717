// kernels/cuda/*.h for builds without CUDA: every launcher exists, so the ops above call them without a
// preprocessor guard, and each throws DeviceError naming itself. In such a build no tensor can live on a CUDA
// device, so these are reached only by calling a kernel directly (the pattern of runtime/cuda_context_none.cpp).
#include "kernels/cuda/attention.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_lt.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/optim_update.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/softmax.h"
#include "runtime/errors.h"

namespace shardrt::kernels::cuda {

namespace {

[[noreturn]] void unavailable(const char* kernel) {
  throw DeviceError(detail::concat("kernels::cuda::", kernel, ": not built with CUDA"));
}

}  // namespace

// ---- elementwise.h ----

template <typename T>
void unary(UnaryOp, int64_t, const T*, T*, CudaStream) {
  unavailable("unary");
}
template <typename T>
void unary_backward(UnaryOp, int64_t, const T*, const T*, const T*, T*, CudaStream) {
  unavailable("unary_backward");
}
template <typename T>
void pow_scalar(int64_t, const T*, T, T*, CudaStream) {
  unavailable("pow_scalar");
}
template <typename T>
void pow_scalar_backward(int64_t, const T*, T, const T*, T*, CudaStream) {
  unavailable("pow_scalar_backward");
}
template <typename T>
void clamp(int64_t, const T*, T, T, T*, CudaStream) {
  unavailable("clamp");
}
template <typename T>
void clamp_backward(int64_t, const T*, T, T, const T*, T*, CudaStream) {
  unavailable("clamp_backward");
}
template <typename T>
void affine(int64_t, const T*, T, T, T*, CudaStream) {
  unavailable("affine");
}
template <typename T>
void fill(int64_t, T, T*, CudaStream) {
  unavailable("fill");
}
template <typename T>
void axpy(int64_t, T, const T*, T*, CudaStream) {
  unavailable("axpy");
}
template <typename T>
void binary(BinaryOp, int, const int64_t*, const T*, const int64_t*, const T*, const int64_t*, T*, CudaStream) {
  unavailable("binary");
}
template <typename T>
void compare(CompareOp, int, const int64_t*, const T*, const int64_t*, const T*, const int64_t*, uint8_t*,
             CudaStream) {
  unavailable("compare");
}
template <typename T>
void where(int, const int64_t*, const uint8_t*, const int64_t*, const T*, const int64_t*, const T*, const int64_t*,
           T*, CudaStream) {
  unavailable("where");
}

// ---- norm.h ----

template <typename T>
void layernorm(int64_t, int64_t, const T*, const T*, const T*, T, T*, T*, T*, CudaStream) {
  unavailable("layernorm");
}
template <typename T>
void layernorm_backward(int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*, T*, T*,
                        CudaStream) {
  unavailable("layernorm_backward");
}

// ---- reduce.h ----

template <typename T>
void reduce_sum(int64_t, int64_t, int64_t, const T*, T*, CudaStream) {
  unavailable("reduce_sum");
}
template <typename T>
void reduce_mean(int64_t, int64_t, int64_t, const T*, T*, CudaStream) {
  unavailable("reduce_mean");
}
template <typename T>
void reduce_max(int64_t, int64_t, int64_t, const T*, T*, int64_t*, CudaStream) {
  unavailable("reduce_max");
}
template <typename T>
void reduce_min(int64_t, int64_t, int64_t, const T*, T*, int64_t*, CudaStream) {
  unavailable("reduce_min");
}
template <typename T>
void reduce_argmax(int64_t, int64_t, int64_t, const T*, int64_t*, CudaStream) {
  unavailable("reduce_argmax");
}
template <typename T>
void reduce_logsumexp(int64_t, int64_t, int64_t, const T*, T*, CudaStream) {
  unavailable("reduce_logsumexp");
}
template <typename T>
void reduce_sum_backward(int64_t, int64_t, int64_t, const T*, T*, CudaStream) {
  unavailable("reduce_sum_backward");
}
template <typename T>
void reduce_mean_backward(int64_t, int64_t, int64_t, const T*, T*, CudaStream) {
  unavailable("reduce_mean_backward");
}
template <typename T>
void reduce_index_backward(int64_t, int64_t, int64_t, const int64_t*, const T*, T*, CudaStream) {
  unavailable("reduce_index_backward");
}
template <typename T>
void reduce_logsumexp_backward(int64_t, int64_t, int64_t, const T*, const T*, const T*, T*, CudaStream) {
  unavailable("reduce_logsumexp_backward");
}

// ---- softmax.h ----

template <typename T>
void softmax(int64_t, int64_t, int64_t, const T*, T*, CudaStream) {
  unavailable("softmax");
}
template <typename T>
void softmax_backward(int64_t, int64_t, int64_t, const T*, const T*, T*, CudaStream) {
  unavailable("softmax_backward");
}
template <typename T>
void log_softmax(int64_t, int64_t, int64_t, const T*, T*, CudaStream) {
  unavailable("log_softmax");
}
template <typename T>
void log_softmax_backward(int64_t, int64_t, int64_t, const T*, const T*, T*, CudaStream) {
  unavailable("log_softmax_backward");
}

// ---- gemm.h ----

void gemm(DType, bool, bool, int64_t, int64_t, int64_t, double, const void*, int64_t, const void*, int64_t, double,
          void*, int64_t, CudaStream) {
  unavailable("gemm");
}
void gemm_strided_batched(DType, bool, bool, int64_t, int64_t, int64_t, double, const void*, int64_t, const void*,
                          int64_t, double, void*, int64_t, int64_t, int64_t, int64_t, int64_t, CudaStream) {
  unavailable("gemm_strided_batched");
}
void gemm_strided_batched_mixed(DType, bool, bool, int64_t, int64_t, int64_t, double, const void*, int64_t,
                                const void*, int64_t, double, float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                CudaStream) {
  unavailable("gemm_strided_batched_mixed");
}

// ---- gemm_lt.h ----

bool gemm_lt(DType, bool, bool, int64_t, int64_t, int64_t, const void*, int64_t, const void*, int64_t, void*, int64_t,
             LtEpilogue, const void*, bool, CudaStream) {
  unavailable("gemm_lt");
}

// The float and double instantiations the .cu files provide in a CUDA build.
#define SHARDRT_INSTANTIATE_UNAVAILABLE(T)                                                                           \
  template void unary<T>(UnaryOp, int64_t, const T*, T*, CudaStream);                                               \
  template void unary_backward<T>(UnaryOp, int64_t, const T*, const T*, const T*, T*, CudaStream);                  \
  template void pow_scalar<T>(int64_t, const T*, T, T*, CudaStream);                                                \
  template void pow_scalar_backward<T>(int64_t, const T*, T, const T*, T*, CudaStream);                             \
  template void clamp<T>(int64_t, const T*, T, T, T*, CudaStream);                                                  \
  template void clamp_backward<T>(int64_t, const T*, T, T, const T*, T*, CudaStream);                               \
  template void affine<T>(int64_t, const T*, T, T, T*, CudaStream);                                                 \
  template void fill<T>(int64_t, T, T*, CudaStream);                                                                \
  template void axpy<T>(int64_t, T, const T*, T*, CudaStream);                                                      \
  template void binary<T>(BinaryOp, int, const int64_t*, const T*, const int64_t*, const T*, const int64_t*, T*,    \
                          CudaStream);                                                                              \
  template void compare<T>(CompareOp, int, const int64_t*, const T*, const int64_t*, const T*, const int64_t*,       \
                           uint8_t*, CudaStream);                                                                   \
  template void where<T>(int, const int64_t*, const uint8_t*, const int64_t*, const T*, const int64_t*, const T*,    \
                         const int64_t*, T*, CudaStream);                                                           \
  template void layernorm<T>(int64_t, int64_t, const T*, const T*, const T*, T, T*, T*, T*, CudaStream);            \
  template void layernorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*, T*,    \
                                      T*, CudaStream);                                                              \
  template void reduce_sum<T>(int64_t, int64_t, int64_t, const T*, T*, CudaStream);                                 \
  template void reduce_mean<T>(int64_t, int64_t, int64_t, const T*, T*, CudaStream);                                \
  template void reduce_max<T>(int64_t, int64_t, int64_t, const T*, T*, int64_t*, CudaStream);                       \
  template void reduce_min<T>(int64_t, int64_t, int64_t, const T*, T*, int64_t*, CudaStream);                       \
  template void reduce_argmax<T>(int64_t, int64_t, int64_t, const T*, int64_t*, CudaStream);                        \
  template void reduce_logsumexp<T>(int64_t, int64_t, int64_t, const T*, T*, CudaStream);                           \
  template void reduce_sum_backward<T>(int64_t, int64_t, int64_t, const T*, T*, CudaStream);                        \
  template void reduce_mean_backward<T>(int64_t, int64_t, int64_t, const T*, T*, CudaStream);                       \
  template void reduce_index_backward<T>(int64_t, int64_t, int64_t, const int64_t*, const T*, T*, CudaStream);      \
  template void reduce_logsumexp_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, T*,           \
                                             CudaStream);                                                           \
  template void softmax<T>(int64_t, int64_t, int64_t, const T*, T*, CudaStream);                                    \
  template void softmax_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, T*, CudaStream);                 \
  template void log_softmax<T>(int64_t, int64_t, int64_t, const T*, T*, CudaStream);                                \
  template void log_softmax_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, T*, CudaStream);

SHARDRT_INSTANTIATE_UNAVAILABLE(float)
SHARDRT_INSTANTIATE_UNAVAILABLE(double)
#undef SHARDRT_INSTANTIATE_UNAVAILABLE

// ---- attention.h (float, double, bf16, f16) ----

template <typename T>
void attention_forward(int64_t, int64_t, int64_t, int64_t, int64_t, AccumT<T>, const T*, const T*, const T*, T*,
                       AccumT<T>*, CudaStream) {
  unavailable("attention_forward");
}
template <typename T>
void attention_backward(int64_t, int64_t, int64_t, int64_t, int64_t, AccumT<T>, const T*, const T*, const T*,
                        const T*, const AccumT<T>*, const T*, const AccumT<T>*, T*, T*, T*, CudaStream) {
  unavailable("attention_backward");
}
template <typename T>
void attention_merge(int64_t, int64_t, T*, AccumT<T>*, const T*, const AccumT<T>*, CudaStream) {
  unavailable("attention_merge");
}
#define SHARDRT_INSTANTIATE_UNAVAILABLE_ATTENTION(T)                                                               \
  template void attention_forward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, AccumT<T>, const T*, const T*,   \
                                     const T*, T*, AccumT<T>*, CudaStream);                                        \
  template void attention_backward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, AccumT<T>, const T*, const T*,  \
                                      const T*, const T*, const AccumT<T>*, const T*, const AccumT<T>*, T*, T*, T*, \
                                      CudaStream);                                                                 \
  template void attention_merge<T>(int64_t, int64_t, T*, AccumT<T>*, const T*, const AccumT<T>*, CudaStream);
SHARDRT_INSTANTIATE_UNAVAILABLE_ATTENTION(float)
SHARDRT_INSTANTIATE_UNAVAILABLE_ATTENTION(double)
SHARDRT_INSTANTIATE_UNAVAILABLE_ATTENTION(bf16)
SHARDRT_INSTANTIATE_UNAVAILABLE_ATTENTION(f16)
#undef SHARDRT_INSTANTIATE_UNAVAILABLE_ATTENTION

// ---- optim_update.h (float, double) ----

template <typename T>
void adamw_update(int64_t, T*, const T*, T*, T*, const AdamWHyper&, ParamCopy, CudaStream) {
  unavailable("adamw_update");
}
template <typename T>
void sgd_update(int64_t, T*, const T*, T*, const SGDHyper&, ParamCopy, CudaStream) {
  unavailable("sgd_update");
}
template <typename T>
void muon_update(int64_t, int64_t, T*, const T*, T*, const MuonHyper&, ParamCopy, CudaStream) {
  unavailable("muon_update");
}
template void adamw_update<float>(int64_t, float*, const float*, float*, float*, const AdamWHyper&, ParamCopy,
                                  CudaStream);
template void adamw_update<double>(int64_t, double*, const double*, double*, double*, const AdamWHyper&, ParamCopy,
                                   CudaStream);
template void sgd_update<float>(int64_t, float*, const float*, float*, const SGDHyper&, ParamCopy, CudaStream);
template void sgd_update<double>(int64_t, double*, const double*, double*, const SGDHyper&, ParamCopy, CudaStream);
template void muon_update<float>(int64_t, int64_t, float*, const float*, float*, const MuonHyper&, ParamCopy,
                                 CudaStream);
template void muon_update<double>(int64_t, int64_t, double*, const double*, double*, const MuonHyper&, ParamCopy,
                                  CudaStream);

void advance_step(DeviceStepScalars*, const double*, int64_t, int64_t, double, const StepRules&, CudaStream) {
  unavailable("advance_step");
}
void clip_coefficient(const double*, double, double*, double*, CudaStream) { unavailable("clip_coefficient"); }
template <typename T>
void adamw_update_scheduled(int64_t, T*, const T*, T*, T*, const AdamWHyper&, const DeviceStepScalars*, ParamCopy,
                            CudaStream) {
  unavailable("adamw_update_scheduled");
}
template <typename T>
void sgd_update_scheduled(int64_t, T*, const T*, T*, const SGDHyper&, const DeviceStepScalars*, ParamCopy,
                          CudaStream) {
  unavailable("sgd_update_scheduled");
}
template <typename T>
void sum_squares_add(int64_t, const T*, double*, double*, CudaStream) {
  unavailable("sum_squares_add");
}
template <typename T>
void scale_by(int64_t, T*, const double*, double, CudaStream) {
  unavailable("scale_by");
}
#define SHARDRT_INSTANTIATE_UNAVAILABLE_SCHEDULED(T)                                                                \
  template void adamw_update_scheduled<T>(int64_t, T*, const T*, T*, T*, const AdamWHyper&,                     \
                                          const DeviceStepScalars*, ParamCopy, CudaStream);                     \
  template void sgd_update_scheduled<T>(int64_t, T*, const T*, T*, const SGDHyper&, const DeviceStepScalars*,   \
                                        ParamCopy, CudaStream);                                                 \
  template void sum_squares_add<T>(int64_t, const T*, double*, double*, CudaStream);                            \
  template void scale_by<T>(int64_t, T*, const double*, double, CudaStream);
SHARDRT_INSTANTIATE_UNAVAILABLE_SCHEDULED(float)
SHARDRT_INSTANTIATE_UNAVAILABLE_SCHEDULED(double)
#undef SHARDRT_INSTANTIATE_UNAVAILABLE_SCHEDULED

}  // namespace shardrt::kernels::cuda
