// Elementwise kernels on a CUDA device.
// Contract: kernels/cpu/elementwise.h (same ops, aliasing, broadcasting and strides), with the op sets and their
// NaN, kink and pow rules from kernels/elementwise_ops.h. CUDA: templates over T in {float, double}; pointers are
// device memory on the device that owns `stream`; queued on `stream`, never synchronises. Broadcasting ops take
// ndim <= 8, and their shape and stride arrays are host memory, read before the call returns.
#pragma once
#include <cstdint>

#include "kernels/elementwise_ops.h"
#include "runtime/cuda_context.h"

namespace shardrt::kernels::cuda {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

// ---- unary maps over n contiguous elements ----

template <typename T>
void unary(UnaryOp op, int64_t n, const T* x, T* y, CudaStream stream);
template <typename T>
void unary_backward(UnaryOp op, int64_t n, const T* x, const T* y, const T* gy, T* gx, CudaStream stream);

template <typename T>
void pow_scalar(int64_t n, const T* x, T p, T* y, CudaStream stream);
template <typename T>
void pow_scalar_backward(int64_t n, const T* x, T p, const T* gy, T* gx, CudaStream stream);

template <typename T>
void clamp(int64_t n, const T* x, T lo, T hi, T* y, CudaStream stream);
template <typename T>
void clamp_backward(int64_t n, const T* x, T lo, T hi, const T* gy, T* gx, CudaStream stream);

template <typename T>
void affine(int64_t n, const T* x, T scale, T shift, T* y, CudaStream stream);

template <typename T>
void fill(int64_t n, T value, T* y, CudaStream stream);

template <typename T>
void axpy(int64_t n, T alpha, const T* x, T* y, CudaStream stream);

// ---- broadcasting ops (ndim <= 8) ----

template <typename T>
void binary(BinaryOp op, int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
            const int64_t* b_strides, T* out, CudaStream stream);

template <typename T>
void compare(CompareOp op, int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
             const int64_t* b_strides, uint8_t* out, CudaStream stream);

template <typename T>
void where(int ndim, const int64_t* out_shape, const uint8_t* cond, const int64_t* cond_strides, const T* a,
           const int64_t* a_strides, const T* b, const int64_t* b_strides, T* out, CudaStream stream);

}  // namespace shardrt::kernels::cuda
