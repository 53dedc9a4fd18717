#include "kernels/cuda/elementwise.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "kernels/cuda/launch.cuh"
#include "runtime/cuda/stream.h"

namespace shardrt::kernels::cuda {
namespace {

constexpr int kMaxDims = 8;

// Launches kernel(args...) with one thread per element of an n-element grid-stride loop; nothing when n == 0.
template <typename... Params, typename... Args>
void launch(int64_t n, cudaStream_t stream, void (*kernel)(Params...), Args&&... args) {
  if (n <= 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
  kernel<<<blocks, kThreads, 0, stream>>>(std::forward<Args>(args)...);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

// The device math library under one name per function for both precisions.
template <typename T>
struct Math;
template <>
struct Math<float> {
  static __device__ float exp(float v) { return expf(v); }
  static __device__ float log(float v) { return logf(v); }
  static __device__ float sqrt(float v) { return sqrtf(v); }
  static __device__ float tanh(float v) { return tanhf(v); }
  static __device__ float erf(float v) { return erff(v); }
  static __device__ float abs(float v) { return fabsf(v); }
  static __device__ float pow(float u, float v) { return powf(u, v); }
};
template <>
struct Math<double> {
  static __device__ double exp(double v) { return ::exp(v); }
  static __device__ double log(double v) { return ::log(v); }
  static __device__ double sqrt(double v) { return ::sqrt(v); }
  static __device__ double tanh(double v) { return ::tanh(v); }
  static __device__ double erf(double v) { return ::erf(v); }
  static __device__ double abs(double v) { return ::fabs(v); }
  static __device__ double pow(double u, double v) { return ::pow(u, v); }
};

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kInvSqrtPi = 0.5641895835477563;
constexpr double kGeluTanhCubic = 0.044715;

// NaN is the only value that compares unequal to itself.
template <typename T>
__device__ bool is_nan(T v) {
  return v != v;
}

// NaN-propagating max/min (fmax/fmin would drop the NaN).
template <typename T>
__device__ T nan_max(T a, T b) {
  return (a > b || is_nan(a)) ? a : b;
}
template <typename T>
__device__ T nan_min(T a, T b) {
  return (a < b || is_nan(a)) ? a : b;
}

// exp of a non-positive argument only, so large |x| neither overflows nor loses the small tail.
template <typename T>
__device__ T sigmoid_of(T x) {
  if (x >= T(0)) return T(1) / (T(1) + Math<T>::exp(-x));
  const T e = Math<T>::exp(x);
  return e / (T(1) + e);
}

template <typename T>
__device__ T gelu_tanh_inner(T x) {
  return T(kSqrt2) * T(kInvSqrtPi) * (x + T(kGeluTanhCubic) * x * x * x);
}

template <typename T, UnaryOp Op>
__device__ T unary_value(T v) {
  using M = Math<T>;
  if constexpr (Op == UnaryOp::neg) return -v;
  else if constexpr (Op == UnaryOp::exp) return M::exp(v);
  else if constexpr (Op == UnaryOp::log) return M::log(v);
  else if constexpr (Op == UnaryOp::sqrt) return M::sqrt(v);
  else if constexpr (Op == UnaryOp::rsqrt) return T(1) / M::sqrt(v);
  else if constexpr (Op == UnaryOp::tanh) return M::tanh(v);
  else if constexpr (Op == UnaryOp::erf) return M::erf(v);
  else if constexpr (Op == UnaryOp::abs) return M::abs(v);
  else if constexpr (Op == UnaryOp::relu) return v < T(0) ? T(0) : v;
  else if constexpr (Op == UnaryOp::gelu_erf) return T(0.5) * v * (T(1) + M::erf(v * T(kSqrt2) / T(2)));
  else if constexpr (Op == UnaryOp::gelu_tanh) return T(0.5) * v * (T(1) + M::tanh(gelu_tanh_inner(v)));
  else if constexpr (Op == UnaryOp::silu) return v * sigmoid_of(v);
  else return sigmoid_of(v);
}

// f'(x), from x and fx = f(x): some derivatives are cheaper from the output (exp, sqrt, rsqrt, tanh, sigmoid).
template <typename T, UnaryOp Op>
__device__ T unary_derivative(T x, T fx) {
  using M = Math<T>;
  if constexpr (Op == UnaryOp::neg) return T(-1);
  else if constexpr (Op == UnaryOp::exp) return fx;
  else if constexpr (Op == UnaryOp::log) return T(1) / x;
  else if constexpr (Op == UnaryOp::sqrt) return T(0.5) / fx;
  else if constexpr (Op == UnaryOp::rsqrt) return T(-0.5) * fx * fx * fx;
  else if constexpr (Op == UnaryOp::tanh) return T(1) - fx * fx;
  else if constexpr (Op == UnaryOp::erf) return T(2) * T(kInvSqrtPi) * M::exp(-x * x);
  else if constexpr (Op == UnaryOp::abs) return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  else if constexpr (Op == UnaryOp::relu) return x > T(0) ? T(1) : T(0);
  else if constexpr (Op == UnaryOp::gelu_erf) {
    const T cdf = T(0.5) * (T(1) + M::erf(x * T(kSqrt2) / T(2)));
    const T pdf = M::exp(T(-0.5) * x * x) * T(kInvSqrtPi) / T(kSqrt2);
    return cdf + x * pdf;
  } else if constexpr (Op == UnaryOp::gelu_tanh) {
    const T t = M::tanh(gelu_tanh_inner(x));
    const T du_dx = T(kSqrt2) * T(kInvSqrtPi) * (T(1) + T(3) * T(kGeluTanhCubic) * x * x);
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du_dx;
  } else if constexpr (Op == UnaryOp::silu) {
    // Recomputes sigmoid from x: y = x * sigmoid(x) cannot give it back at x == 0.
    const T s = sigmoid_of(x);
    return s * (T(1) + x * (T(1) - s));
  } else {
    return fx * (T(1) - fx);
  }
}

// Calls f with std::integral_constant<UnaryOp, op>, turning the runtime op into a template argument so each op
// gets its own branch-free kernel.
template <class F>
void with_unary_op(UnaryOp op, F&& f) {
  using U = UnaryOp;
  switch (op) {
    case U::neg: return f(std::integral_constant<U, U::neg>{});
    case U::exp: return f(std::integral_constant<U, U::exp>{});
    case U::log: return f(std::integral_constant<U, U::log>{});
    case U::sqrt: return f(std::integral_constant<U, U::sqrt>{});
    case U::rsqrt: return f(std::integral_constant<U, U::rsqrt>{});
    case U::tanh: return f(std::integral_constant<U, U::tanh>{});
    case U::erf: return f(std::integral_constant<U, U::erf>{});
    case U::abs: return f(std::integral_constant<U, U::abs>{});
    case U::relu: return f(std::integral_constant<U, U::relu>{});
    case U::gelu_erf: return f(std::integral_constant<U, U::gelu_erf>{});
    case U::gelu_tanh: return f(std::integral_constant<U, U::gelu_tanh>{});
    case U::silu: return f(std::integral_constant<U, U::silu>{});
    case U::sigmoid: return f(std::integral_constant<U, U::sigmoid>{});
  }
}

template <typename T, UnaryOp Op>
__global__ void unary_kernel(int64_t n, const T* x, T* y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = unary_value<T, Op>(x[i]);
}

template <typename T, UnaryOp Op>
__global__ void unary_backward_kernel(int64_t n, const T* x, const T* y, const T* gy, T* gx) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) gx[i] = gy[i] * unary_derivative<T, Op>(x[i], y[i]);
}

template <typename T>
__global__ void pow_scalar_kernel(int64_t n, const T* x, T p, T* y) {
  // Squares (variances, L2 losses) are the common case and pow is far slower than a multiply.
  if (p == T(2)) {
    for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = x[i] * x[i];
  } else {
    for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = Math<T>::pow(x[i], p);
  }
}

template <typename T>
__global__ void pow_scalar_backward_kernel(int64_t n, const T* x, T p, const T* gy, T* gx) {
  // p == 0 gives exactly 0, even at x == 0 where p * x^(p-1) would be 0 * inf = NaN.
  if (p == T(0)) {
    for (int64_t i = first_index(); i < n; i += grid_stride()) gx[i] = T(0);
  } else {
    for (int64_t i = first_index(); i < n; i += grid_stride()) gx[i] = gy[i] * p * Math<T>::pow(x[i], p - T(1));
  }
}

template <typename T>
__global__ void clamp_kernel(int64_t n, const T* x, T lo, T hi, T* y) {
  // A lower clamp then an upper one, so lo > hi yields hi everywhere.
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = nan_min(nan_max(x[i], lo), hi);
}

template <typename T>
__global__ void clamp_backward_kernel(int64_t n, const T* x, T lo, T hi, const T* gy, T* gx) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) gx[i] = (lo <= x[i] && x[i] <= hi) ? gy[i] : T(0);
}

template <typename T>
__global__ void affine_kernel(int64_t n, const T* x, T scale, T shift, T* y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = scale * x[i] + shift;
}

template <typename T>
__global__ void fill_kernel(int64_t n, T value, T* y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = value;
}

template <typename T>
__global__ void axpy_kernel(int64_t n, T alpha, const T* x, T* y) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] += alpha * x[i];
}

// ---- broadcasting ----

// The iteration space of a broadcasting op after dropping size-1 dims and merging neighbouring dims that every
// operand walks as one (same-shape contiguous operands become 1-d). Passed to kernels by value.
template <int Arity>
struct Broadcast {
  int ndim = 0;
  int64_t numel = 1;
  int64_t shape[kMaxDims] = {};
  int64_t strides[Arity][kMaxDims] = {};

  // Every operand is read at the output's flat index: the contiguous fast path.
  bool is_flat() const {
    if (ndim != 1) return false;
    for (int k = 0; k < Arity; ++k) {
      if (strides[k][0] != 1) return false;
    }
    return true;
  }
};

template <int Arity>
Broadcast<Arity> make_broadcast(int ndim, const int64_t* shape, const int64_t* const (&strides)[Arity]) {
  SHARDRT_CHECK(ndim <= kMaxDims, ShapeError, "cuda broadcasting op: rank ", ndim, " > ", kMaxDims,
                " is not supported");
  Broadcast<Arity> g;
  for (int d = 0; d < ndim; ++d) {
    g.numel *= shape[d];
    if (shape[d] == 1) continue;
    bool mergeable = g.ndim > 0;
    for (int k = 0; k < Arity && mergeable; ++k) mergeable = g.strides[k][g.ndim - 1] == strides[k][d] * shape[d];
    if (mergeable) {
      g.shape[g.ndim - 1] *= shape[d];
      for (int k = 0; k < Arity; ++k) g.strides[k][g.ndim - 1] = strides[k][d];
    } else {
      g.shape[g.ndim] = shape[d];
      for (int k = 0; k < Arity; ++k) g.strides[k][g.ndim] = strides[k][d];
      ++g.ndim;
    }
  }
  if (g.ndim == 0) {  // a single element; its strides stay 0
    g.ndim = 1;
    g.shape[0] = 1;
  }
  return g;
}

// Element offsets of each operand for flat output index i (row-major, last dim fastest). The dim loop has a fixed
// trip count so the geometry stays in the kernel's parameter space.
template <int Arity>
__device__ __forceinline__ void operand_offsets(const Broadcast<Arity>& g, int64_t i, int64_t (&off)[Arity]) {
  int64_t rest = i;
#pragma unroll
  for (int k = 0; k < Arity; ++k) off[k] = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d > 0; --d) {
    if (d < g.ndim) {
      const int64_t idx = rest % g.shape[d];
      rest /= g.shape[d];
#pragma unroll
      for (int k = 0; k < Arity; ++k) off[k] += idx * g.strides[k][d];
    }
  }
#pragma unroll
  for (int k = 0; k < Arity; ++k) off[k] += rest * g.strides[k][0];
}

template <typename T, BinaryOp Op>
struct BinaryFn {
  static __device__ T apply(T u, T v) {
    if constexpr (Op == BinaryOp::add) return u + v;
    else if constexpr (Op == BinaryOp::sub) return u - v;
    else if constexpr (Op == BinaryOp::mul) return u * v;
    else if constexpr (Op == BinaryOp::div) return u / v;
    else if constexpr (Op == BinaryOp::pow) return Math<T>::pow(u, v);
    else if constexpr (Op == BinaryOp::maximum) return nan_max(u, v);
    else return nan_min(u, v);
  }
};

template <typename T, CompareOp Op>
struct CompareFn {
  static __device__ uint8_t apply(T u, T v) {
    if constexpr (Op == CompareOp::eq) return u == v;
    else if constexpr (Op == CompareOp::ne) return u != v;
    else if constexpr (Op == CompareOp::lt) return u < v;
    else if constexpr (Op == CompareOp::le) return u <= v;
    else if constexpr (Op == CompareOp::gt) return u > v;
    else return u >= v;
  }
};

template <typename T, typename Out, class Fn>
__global__ void broadcast2_kernel(Broadcast<2> g, const T* a, const T* b, Out* out) {
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t off[2];
    operand_offsets(g, i, off);
    out[i] = Fn::apply(a[off[0]], b[off[1]]);
  }
}

template <typename T, typename Out, class Fn>
__global__ void flat2_kernel(int64_t n, const T* a, const T* b, Out* out) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = Fn::apply(a[i], b[i]);
}

template <typename T>
__global__ void where_kernel(Broadcast<3> g, const uint8_t* cond, const T* a, const T* b, T* out) {
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t off[3];
    operand_offsets(g, i, off);
    out[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
  }
}

template <typename T>
__global__ void flat_where_kernel(int64_t n, const uint8_t* cond, const T* a, const T* b, T* out) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = cond[i] ? a[i] : b[i];
}

// out = Fn::apply(a, b) with broadcasting.
template <typename T, typename Out, class Fn>
void broadcast2(int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
                const int64_t* b_strides, Out* out, cudaStream_t stream) {
  const Broadcast<2> g = make_broadcast<2>(ndim, out_shape, {a_strides, b_strides});
  if (g.is_flat()) {
    launch(g.numel, stream, flat2_kernel<T, Out, Fn>, g.numel, a, b, out);
  } else {
    launch(g.numel, stream, broadcast2_kernel<T, Out, Fn>, g, a, b, out);
  }
}

}  // namespace

template <typename T>
void unary(UnaryOp op, int64_t n, const T* x, T* y, cudaStream_t stream) {
  with_unary_op(op, [&](auto tag) { launch(n, stream, unary_kernel<T, decltype(tag)::value>, n, x, y); });
}

template <typename T>
void unary_backward(UnaryOp op, int64_t n, const T* x, const T* y, const T* gy, T* gx, cudaStream_t stream) {
  with_unary_op(op, [&](auto tag) {
    launch(n, stream, unary_backward_kernel<T, decltype(tag)::value>, n, x, y, gy, gx);
  });
}

template <typename T>
void pow_scalar(int64_t n, const T* x, T p, T* y, cudaStream_t stream) {
  launch(n, stream, pow_scalar_kernel<T>, n, x, p, y);
}

template <typename T>
void pow_scalar_backward(int64_t n, const T* x, T p, const T* gy, T* gx, cudaStream_t stream) {
  launch(n, stream, pow_scalar_backward_kernel<T>, n, x, p, gy, gx);
}

template <typename T>
void clamp(int64_t n, const T* x, T lo, T hi, T* y, cudaStream_t stream) {
  launch(n, stream, clamp_kernel<T>, n, x, lo, hi, y);
}

template <typename T>
void clamp_backward(int64_t n, const T* x, T lo, T hi, const T* gy, T* gx, cudaStream_t stream) {
  launch(n, stream, clamp_backward_kernel<T>, n, x, lo, hi, gy, gx);
}

template <typename T>
void affine(int64_t n, const T* x, T scale, T shift, T* y, cudaStream_t stream) {
  launch(n, stream, affine_kernel<T>, n, x, scale, shift, y);
}

template <typename T>
void fill(int64_t n, T value, T* y, cudaStream_t stream) {
  launch(n, stream, fill_kernel<T>, n, value, y);
}

template <typename T>
void axpy(int64_t n, T alpha, const T* x, T* y, cudaStream_t stream) {
  launch(n, stream, axpy_kernel<T>, n, alpha, x, y);
}

template <typename T>
void binary(BinaryOp op, int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
            const int64_t* b_strides, T* out, cudaStream_t stream) {
  auto run = [&](auto fn) {
    broadcast2<T, T, decltype(fn)>(ndim, out_shape, a, a_strides, b, b_strides, out, stream);
  };
  switch (op) {
    case BinaryOp::add: return run(BinaryFn<T, BinaryOp::add>{});
    case BinaryOp::sub: return run(BinaryFn<T, BinaryOp::sub>{});
    case BinaryOp::mul: return run(BinaryFn<T, BinaryOp::mul>{});
    case BinaryOp::div: return run(BinaryFn<T, BinaryOp::div>{});
    case BinaryOp::pow: return run(BinaryFn<T, BinaryOp::pow>{});
    case BinaryOp::maximum: return run(BinaryFn<T, BinaryOp::maximum>{});
    case BinaryOp::minimum: return run(BinaryFn<T, BinaryOp::minimum>{});
  }
}

template <typename T>
void compare(CompareOp op, int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
             const int64_t* b_strides, uint8_t* out, cudaStream_t stream) {
  auto run = [&](auto fn) {
    broadcast2<T, uint8_t, decltype(fn)>(ndim, out_shape, a, a_strides, b, b_strides, out, stream);
  };
  switch (op) {
    case CompareOp::eq: return run(CompareFn<T, CompareOp::eq>{});
    case CompareOp::ne: return run(CompareFn<T, CompareOp::ne>{});
    case CompareOp::lt: return run(CompareFn<T, CompareOp::lt>{});
    case CompareOp::le: return run(CompareFn<T, CompareOp::le>{});
    case CompareOp::gt: return run(CompareFn<T, CompareOp::gt>{});
    case CompareOp::ge: return run(CompareFn<T, CompareOp::ge>{});
  }
}

template <typename T>
void where(int ndim, const int64_t* out_shape, const uint8_t* cond, const int64_t* cond_strides, const T* a,
           const int64_t* a_strides, const T* b, const int64_t* b_strides, T* out, cudaStream_t stream) {
  const Broadcast<3> g = make_broadcast<3>(ndim, out_shape, {cond_strides, a_strides, b_strides});
  if (g.is_flat()) {
    launch(g.numel, stream, flat_where_kernel<T>, g.numel, cond, a, b, out);
  } else {
    launch(g.numel, stream, where_kernel<T>, g, cond, a, b, out);
  }
}

#define SHARDRT_INSTANTIATE_ELEMENTWISE(T)                                                                          \
  template void unary<T>(UnaryOp, int64_t, const T*, T*, cudaStream_t);                                             \
  template void unary_backward<T>(UnaryOp, int64_t, const T*, const T*, const T*, T*, cudaStream_t);                \
  template void pow_scalar<T>(int64_t, const T*, T, T*, cudaStream_t);                                              \
  template void pow_scalar_backward<T>(int64_t, const T*, T, const T*, T*, cudaStream_t);                           \
  template void clamp<T>(int64_t, const T*, T, T, T*, cudaStream_t);                                                \
  template void clamp_backward<T>(int64_t, const T*, T, T, const T*, T*, cudaStream_t);                             \
  template void affine<T>(int64_t, const T*, T, T, T*, cudaStream_t);                                               \
  template void fill<T>(int64_t, T, T*, cudaStream_t);                                                              \
  template void axpy<T>(int64_t, T, const T*, T*, cudaStream_t);                                                    \
  template void binary<T>(BinaryOp, int, const int64_t*, const T*, const int64_t*, const T*, const int64_t*, T*,    \
                          cudaStream_t);                                                                            \
  template void compare<T>(CompareOp, int, const int64_t*, const T*, const int64_t*, const T*, const int64_t*,       \
                           uint8_t*, cudaStream_t);                                                                 \
  template void where<T>(int, const int64_t*, const uint8_t*, const int64_t*, const T*, const int64_t*, const T*,    \
                         const int64_t*, T*, cudaStream_t);

SHARDRT_INSTANTIATE_ELEMENTWISE(float)
SHARDRT_INSTANTIATE_ELEMENTWISE(double)
#undef SHARDRT_INSTANTIATE_ELEMENTWISE

}  // namespace shardrt::kernels::cuda
