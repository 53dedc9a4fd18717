// Elementwise kernels on a CUDA device: unary maps with their backward, scalar-parameter maps, and broadcasting
// binary, compare and select ops over strided inputs. The CUDA twin of kernels/cpu/elementwise.h: same ops, same
// conventions (NaN handling, kinks, broadcasting), templates over T in {float, double}, each queued on `stream`
// without synchronising. Pointers are device memory on the device that owns `stream`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardrt::kernels::cuda {

// ---- unary maps over n contiguous elements; y may alias x, gx may alias gy ----

enum class UnaryOp { neg, exp, log, sqrt, rsqrt, tanh, erf, abs, relu, gelu_erf, gelu_tanh, silu, sigmoid };

// y = f(x). relu and abs propagate NaN. gelu_erf is 0.5 x (1 + erf(x / sqrt 2)); gelu_tanh is the tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
void unary(UnaryOp op, int64_t n, const T* x, T* y, cudaStream_t stream);

// gx = gy * f'(x), from x and y = f(x). Conventions at kinks, as in PyTorch: relu'(0) = 0, abs'(0) = 0.
template <typename T>
void unary_backward(UnaryOp op, int64_t n, const T* x, const T* y, const T* gy, T* gx, cudaStream_t stream);

// y = x^p.
template <typename T>
void pow_scalar(int64_t n, const T* x, T p, T* y, cudaStream_t stream);
// gx = gy * p * x^(p-1); exactly 0 when p == 0.
template <typename T>
void pow_scalar_backward(int64_t n, const T* x, T p, const T* gy, T* gx, cudaStream_t stream);

// y = min(max(x, lo), hi); NaN propagates. Use -inf / +inf for a one-sided clamp. If lo > hi every y is hi.
template <typename T>
void clamp(int64_t n, const T* x, T lo, T hi, T* y, cudaStream_t stream);
// gx = gy where lo <= x <= hi (bounds included), 0 elsewhere.
template <typename T>
void clamp_backward(int64_t n, const T* x, T lo, T hi, const T* gy, T* gx, cudaStream_t stream);

// y = scale * x + shift. Its backward is affine(n, gy, scale, 0, gx).
template <typename T>
void affine(int64_t n, const T* x, T scale, T shift, T* y, cudaStream_t stream);

// y[i] = value.
template <typename T>
void fill(int64_t n, T value, T* y, cudaStream_t stream);

// y += alpha * x (grad accumulation).
template <typename T>
void axpy(int64_t n, T alpha, const T* x, T* y, cudaStream_t stream);

// ---- broadcasting ops ----
// `out` is contiguous row-major with shape out_shape[0..ndim), ndim <= 8. Each input is read at
// sum_d index[d] * strides[d] (strides in elements); a stride of 0 on a dimension broadcasts the input along it
// (a scalar input has all strides 0). ndim == 0 means a single element. Negative strides are allowed. `out` may
// alias an input only when that input has exactly out's contiguous layout. The shape and stride arrays are host
// memory, read before the call returns.

// maximum / minimum propagate NaN; pow follows pow() of the device math library.
enum class BinaryOp { add, sub, mul, div, pow, maximum, minimum };

template <typename T>
void binary(BinaryOp op, int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
            const int64_t* b_strides, T* out, cudaStream_t stream);

// out = (a op b) ? 1 : 0. Comparisons with NaN are false except ne, which is true.
enum class CompareOp { eq, ne, lt, le, gt, ge };

template <typename T>
void compare(CompareOp op, int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
             const int64_t* b_strides, uint8_t* out, cudaStream_t stream);

// out = cond != 0 ? a : b.
template <typename T>
void where(int ndim, const int64_t* out_shape, const uint8_t* cond, const int64_t* cond_strides, const T* a,
           const int64_t* a_strides, const T* b, const int64_t* b_strides, T* out, cudaStream_t stream);

}  // namespace shardrt::kernels::cuda
