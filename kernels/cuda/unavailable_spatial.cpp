// The rest of unavailable.cpp, for the families added with cuDNN convolution: conv, group norm, pooling,
// upsampling, indexing, padding and the neighbour search. Builds without CUDA link this file instead of their .cu
// and conv.cpp sources, so every launcher exists and throws DeviceError naming itself (see unavailable.cpp).
#include "kernels/cuda/conv.h"
#include "kernels/cuda/index.h"
#include "kernels/cuda/neighbor_search.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/pool.h"
#include "kernels/cuda/shape_ops.h"
#include "kernels/cuda/upsample.h"
#include "runtime/errors.h"

namespace shardrt::kernels::cuda {

namespace {

[[noreturn]] void unavailable(const char* kernel) {
  throw DeviceError(detail::concat("kernels::cuda::", kernel, ": not built with CUDA"));
}

}  // namespace

// ---- conv.h ----

template <typename T>
void conv_forward(const ConvGeometry&, const T*, const T*, const T*, T*, CudaStream) {
  unavailable("conv_forward");
}
template <typename T>
void conv_backward(const ConvGeometry&, const T*, const T*, const T*, T*, T*, T*, CudaStream) {
  unavailable("conv_backward");
}
template <typename T>
void conv_transpose_patch_forward(const ConvGeometry&, const T*, const T*, const T*, T*, CudaStream) {
  unavailable("conv_transpose_patch_forward");
}
template <typename T>
void conv_transpose_patch_backward(const ConvGeometry&, const T*, const T*, const T*, T*, T*, T*, CudaStream) {
  unavailable("conv_transpose_patch_backward");
}

// ---- norm.h (group norm) ----

template <typename T>
void groupnorm(int64_t, int64_t, int64_t, int64_t, const T*, const T*, const T*, T, T*, T*, T*, CudaStream) {
  unavailable("groupnorm");
}
template <typename T>
void groupnorm_backward(int64_t, int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*, T*,
                        T*, CudaStream) {
  unavailable("groupnorm_backward");
}

// ---- pool.h ----

template <typename T>
void avg_pool_forward(const ConvGeometry&, const T*, T*, CudaStream) {
  unavailable("avg_pool_forward");
}
template <typename T>
void avg_pool_backward(const ConvGeometry&, const T*, T*, CudaStream) {
  unavailable("avg_pool_backward");
}
template <typename T>
void max_pool_forward(const ConvGeometry&, const T*, T*, int64_t*, CudaStream) {
  unavailable("max_pool_forward");
}
template <typename T>
void max_pool_backward(const ConvGeometry&, const T*, const int64_t*, T*, CudaStream) {
  unavailable("max_pool_backward");
}

// ---- upsample.h ----

template <typename T>
void upsample_forward(UpsampleMode, bool, int, int64_t, const int64_t*, const int64_t*, const T*, T*, CudaStream) {
  unavailable("upsample_forward");
}
template <typename T>
void upsample_backward(UpsampleMode, bool, int, int64_t, const int64_t*, const int64_t*, const T*, T*, CudaStream) {
  unavailable("upsample_backward");
}

// ---- index.h ----

template <typename T>
void index_select(int64_t, int64_t, int64_t, const T*, int64_t, const int64_t*, T*, CudaStream) {
  unavailable("index_select");
}
template <typename T>
void index_add(int64_t, int64_t, int64_t, T*, int64_t, const int64_t*, const T*, CudaStream) {
  unavailable("index_add");
}
template <typename T>
void gather(int64_t, int64_t, int64_t, const T*, int64_t, const int64_t*, T*, CudaStream) {
  unavailable("gather");
}
template <typename T>
void scatter_add(int64_t, int64_t, int64_t, T*, int64_t, const int64_t*, const T*, CudaStream) {
  unavailable("scatter_add");
}
int* index_error_flag(int) { unavailable("index_error_flag"); }
void check_index_bounds(int64_t, const int64_t*, int64_t, int*, CudaStream) { unavailable("check_index_bounds"); }
bool take_index_error(int) { unavailable("take_index_error"); }

// ---- shape_ops.h ----

template <typename T>
void pad(PadMode, int, int64_t, const int64_t*, const int64_t*, const int64_t*, T, const T*, T*, CudaStream) {
  unavailable("pad");
}
template <typename T>
void pad_backward(PadMode, int, int64_t, const int64_t*, const int64_t*, const int64_t*, const T*, T*, CudaStream) {
  unavailable("pad_backward");
}

// ---- neighbor_search.h ----

void merge_block_brute(int64_t, const double*, const double*, int64_t, int64_t, int64_t, int64_t, double, double*,
                       int64_t*, int64_t*, CudaStream) {
  unavailable("merge_block_brute");
}

// The float and double instantiations the CUDA sources provide in a CUDA build.
#define SHARDRT_INSTANTIATE_UNAVAILABLE(T)                                                                          \
  template void conv_forward<T>(const ConvGeometry&, const T*, const T*, const T*, T*, CudaStream);                \
  template void conv_backward<T>(const ConvGeometry&, const T*, const T*, const T*, T*, T*, T*, CudaStream);       \
  template void conv_transpose_patch_forward<T>(const ConvGeometry&, const T*, const T*, const T*, T*, CudaStream); \
  template void conv_transpose_patch_backward<T>(const ConvGeometry&, const T*, const T*, const T*, T*, T*, T*,    \
                                                 CudaStream);                                                      \
  template void groupnorm<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*, const T*, T, T*, T*, T*,      \
                             CudaStream);                                                                          \
  template void groupnorm_backward<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*,  \
                                      const T*, T*, T*, T*, CudaStream);                                           \
  template void avg_pool_forward<T>(const ConvGeometry&, const T*, T*, CudaStream);                                \
  template void avg_pool_backward<T>(const ConvGeometry&, const T*, T*, CudaStream);                               \
  template void max_pool_forward<T>(const ConvGeometry&, const T*, T*, int64_t*, CudaStream);                      \
  template void max_pool_backward<T>(const ConvGeometry&, const T*, const int64_t*, T*, CudaStream);               \
  template void upsample_forward<T>(UpsampleMode, bool, int, int64_t, const int64_t*, const int64_t*, const T*, T*, \
                                    CudaStream);                                                                   \
  template void upsample_backward<T>(UpsampleMode, bool, int, int64_t, const int64_t*, const int64_t*, const T*,    \
                                     T*, CudaStream);                                                              \
  template void index_select<T>(int64_t, int64_t, int64_t, const T*, int64_t, const int64_t*, T*, CudaStream);     \
  template void index_add<T>(int64_t, int64_t, int64_t, T*, int64_t, const int64_t*, const T*, CudaStream);        \
  template void gather<T>(int64_t, int64_t, int64_t, const T*, int64_t, const int64_t*, T*, CudaStream);           \
  template void scatter_add<T>(int64_t, int64_t, int64_t, T*, int64_t, const int64_t*, const T*, CudaStream);      \
  template void pad<T>(PadMode, int, int64_t, const int64_t*, const int64_t*, const int64_t*, T, const T*, T*,     \
                       CudaStream);                                                                                \
  template void pad_backward<T>(PadMode, int, int64_t, const int64_t*, const int64_t*, const int64_t*, const T*,   \
                                T*, CudaStream);

SHARDRT_INSTANTIATE_UNAVAILABLE(float)
SHARDRT_INSTANTIATE_UNAVAILABLE(double)
#undef SHARDRT_INSTANTIATE_UNAVAILABLE

}  // namespace shardrt::kernels::cuda
