// Elementwise kernels: unary maps with their backward, scalar-parameter maps, and broadcasting binary,
// compare and select ops over strided inputs.
#pragma once
#include <cstdint>

#include "kernels/elementwise_ops.h"

namespace shardrt::kernels::cpu {

// The op sets and their semantics (NaN rules, kinks, pow) are the family's, shared with CUDA.
using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

// ---- unary maps over n contiguous elements; y may alias x, gx may alias gy ----

// y = f(x).
template <typename T>
void unary(UnaryOp op, int64_t n, const T* x, T* y);

// gx = gy * f'(x). Both x and y = f(x) are passed because some derivatives are cheaper from y (exp, sqrt, rsqrt,
// tanh, sigmoid).
template <typename T>
void unary_backward(UnaryOp op, int64_t n, const T* x, const T* y, const T* gy, T* gx);

// y = x^p.
template <typename T>
void pow_scalar(int64_t n, const T* x, T p, T* y);
// gx = gy * p * x^(p-1); exactly 0 when p == 0 (even at x == 0, where the formula would give NaN).
template <typename T>
void pow_scalar_backward(int64_t n, const T* x, T p, const T* gy, T* gx);

// y = min(max(x, lo), hi); NaN propagates. Use -inf / +inf for a one-sided clamp. If lo > hi every y is hi.
template <typename T>
void clamp(int64_t n, const T* x, T lo, T hi, T* y);
// gx = gy where lo <= x <= hi (bounds included, as in PyTorch), 0 elsewhere.
template <typename T>
void clamp_backward(int64_t n, const T* x, T lo, T hi, const T* gy, T* gx);

// y = scale * x + shift. Its backward is affine(n, gy, scale, 0, gx).
template <typename T>
void affine(int64_t n, const T* x, T scale, T shift, T* y);

// y[i] = value.
template <typename T>
void fill(int64_t n, T value, T* y);

// y += alpha * x (grad accumulation).
template <typename T>
void axpy(int64_t n, T alpha, const T* x, T* y);

// ---- broadcasting ops ----
// `out` is contiguous row-major with shape out_shape[0..ndim). Each input is read at
// sum_d index[d] * strides[d]; a stride of 0 on a dimension broadcasts the input along it (a scalar input has all
// strides 0). ndim == 0 means a single element. Negative strides are allowed. `out` may alias an input only when
// that input has exactly out's contiguous layout.

template <typename T>
void binary(BinaryOp op, int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
            const int64_t* b_strides, T* out);

// out = (a op b) ? 1 : 0.

template <typename T>
void compare(CompareOp op, int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
             const int64_t* b_strides, uint8_t* out);

// out = cond != 0 ? a : b.
template <typename T>
void where(int ndim, const int64_t* out_shape, const uint8_t* cond, const int64_t* cond_strides, const T* a,
           const int64_t* a_strides, const T* b, const int64_t* b_strides, T* out);

}  // namespace shardrt::kernels::cpu
