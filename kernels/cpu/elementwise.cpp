#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/cpu/elementwise_simd.h"
#include "kernels/cpu/simd.h"

namespace shardrt::kernels::cpu {
namespace {

// Work below this many elements stays on one thread (forking a team costs more than the loop); broadcasting ops
// also hand out their work in chunks of this size.
constexpr int64_t kParallelMin = int64_t{1} << 15;

template <class Body>
void parallel_for(int64_t n, Body body) {
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}

template <typename T, class F>
void map(int64_t n, const T* x, T* y, F f) {
  parallel_for(n, [&](int64_t i) { y[i] = f(x[i]); });
}

// NaN-propagating max/min: std::max would return whichever argument the comparison happens to favour.
template <typename T>
T nan_max(T a, T b) {
  return (a > b || std::isnan(a)) ? a : b;
}
template <typename T>
T nan_min(T a, T b) {
  return (a < b || std::isnan(a)) ? a : b;
}

// The iteration space of a broadcasting op after dropping size-1 dimensions and merging neighbouring dimensions
// that every operand walks as one; the inner loops run over the last dimension. Operand k is read at
// sum_d index[d] * strides[k][d].
template <std::size_t Arity>
struct BroadcastPlan {
  std::vector<int64_t> shape;
  std::array<std::vector<int64_t>, Arity> strides;
  int64_t numel = 1;
};

template <std::size_t Arity>
BroadcastPlan<Arity> make_plan(int ndim, const int64_t* shape, const std::array<const int64_t*, Arity>& strides) {
  BroadcastPlan<Arity> plan;
  for (int d = 0; d < ndim; ++d) {
    plan.numel *= shape[d];
    if (shape[d] == 1) continue;
    bool mergeable = !plan.shape.empty();
    for (std::size_t k = 0; k < Arity && mergeable; ++k) {
      mergeable = plan.strides[k].back() == strides[k][d] * shape[d];
    }
    if (mergeable) {
      plan.shape.back() *= shape[d];
      for (std::size_t k = 0; k < Arity; ++k) plan.strides[k].back() = strides[k][d];
    } else {
      plan.shape.push_back(shape[d]);
      for (std::size_t k = 0; k < Arity; ++k) plan.strides[k].push_back(strides[k][d]);
    }
  }
  if (plan.shape.empty()) {  // a single element
    plan.shape.push_back(1);
    for (std::size_t k = 0; k < Arity; ++k) plan.strides[k].push_back(0);
  }
  return plan;
}

// Calls segment(out_offset, operand_offsets, len) for runs of consecutive output elements that stay within one
// row of the plan's last dimension. The output is cut into fixed chunks so any thread count gives the same runs.
template <std::size_t Arity, class Segment>
void walk(const BroadcastPlan<Arity>& plan, Segment segment) {
  const int nd = static_cast<int>(plan.shape.size());
  const int64_t row_len = plan.shape[nd - 1];
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<int64_t> index(nd);
    std::array<int64_t, Arity> offset{};
    int64_t rest = begin;
    for (int d = nd - 1; d >= 0; --d) {
      index[d] = rest % plan.shape[d];
      rest /= plan.shape[d];
      for (std::size_t k = 0; k < Arity; ++k) offset[k] += index[d] * plan.strides[k][d];
    }
    for (int64_t pos = begin; pos < end;) {
      const int64_t len = std::min(row_len - index[nd - 1], end - pos);
      segment(pos, offset, len);
      pos += len;
      index[nd - 1] += len;
      for (std::size_t k = 0; k < Arity; ++k) offset[k] += len * plan.strides[k][nd - 1];
      for (int d = nd - 1; d > 0 && index[d] == plan.shape[d]; --d) {
        index[d] = 0;
        ++index[d - 1];
        for (std::size_t k = 0; k < Arity; ++k) {
          offset[k] += plan.strides[k][d - 1] - plan.shape[d] * plan.strides[k][d];
        }
      }
    }
  };
  const int64_t chunks = (plan.numel + kParallelMin - 1) / kParallelMin;
#pragma omp parallel for if (chunks > 1) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) run(c * kParallelMin, std::min(plan.numel, (c + 1) * kParallelMin));
}

// out = f(a, b) with broadcasting; the contiguous and one-side-broadcast inner loops are split out so the compiler
// can vectorise them. Runs where both operands are contiguous go to the dispatched vector body of vector_op
// (which must compute f) when one is given; strided and broadcast runs keep the scalar loops.
template <typename T, typename Out, class F>
void broadcast_apply(int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
                     const int64_t* b_strides, Out* out, F f, std::optional<BinaryOp> vector_op = std::nullopt) {
  const BroadcastPlan<2> plan = make_plan<2>(ndim, out_shape, {a_strides, b_strides});
  if (plan.numel == 0) return;
  const int64_t sa = plan.strides[0].back();
  const int64_t sb = plan.strides[1].back();
  walk(plan, [&](int64_t o, const std::array<int64_t, 2>& off, int64_t len) {
    const T* pa = a + off[0];
    const T* pb = b + off[1];
    Out* po = out + o;
    if (sa == 1 && sb == 1) {
      if constexpr (std::is_same_v<Out, T>) {
        if (vector_op) {  // a contiguous run: the vector body, bit for bit the same IEEE result
          simd::binary(*vector_op, len, pa, pb, po);
          return;
        }
      }
      for (int64_t i = 0; i < len; ++i) po[i] = f(pa[i], pb[i]);
    } else if (sa == 0 && sb == 1) {
      const T av = *pa;
      for (int64_t i = 0; i < len; ++i) po[i] = f(av, pb[i]);
    } else if (sa == 1 && sb == 0) {
      const T bv = *pb;
      for (int64_t i = 0; i < len; ++i) po[i] = f(pa[i], bv);
    } else {
      for (int64_t i = 0; i < len; ++i) po[i] = f(pa[i * sa], pb[i * sb]);
    }
  });
}

}  // namespace

// Every unary map and its backward runs through the vector bodies (kernels/cpu/elementwise_simd.cpp), a fixed
// chunk per thread.
template <typename T>
void unary(UnaryOp op, int64_t n, const T* x, T* y) {
  parallel_chunks(n, [&](int64_t begin, int64_t end) { simd::unary(op, end - begin, x + begin, y + begin); });
}

template <typename T>
void unary_backward(UnaryOp op, int64_t n, const T* x, const T* y, const T* gy, T* gx) {
  parallel_chunks(n, [&](int64_t begin, int64_t end) {
    simd::unary_backward(op, end - begin, x + begin, y + begin, gy + begin, gx + begin);
  });
}

template <typename T>
void pow_scalar(int64_t n, const T* x, T p, T* y) {
  if (p == T(2)) {  // squares (variances, L2 losses) are the common case and std::pow is far slower
    map(n, x, y, [](T v) { return v * v; });
  } else {
    map(n, x, y, [p](T v) { return std::pow(v, p); });
  }
}

template <typename T>
void pow_scalar_backward(int64_t n, const T* x, T p, const T* gy, T* gx) {
  if (p == T(0)) {
    fill(n, T(0), gx);
  } else {
    parallel_for(n, [&](int64_t i) { gx[i] = gy[i] * p * std::pow(x[i], p - T(1)); });
  }
}

template <typename T>
void clamp(int64_t n, const T* x, T lo, T hi, T* y) {
  // nan_min/nan_max order: a lower clamp then an upper one, so lo > hi yields hi everywhere.
  map(n, x, y, [lo, hi](T v) { return nan_min(nan_max(v, lo), hi); });
}

template <typename T>
void clamp_backward(int64_t n, const T* x, T lo, T hi, const T* gy, T* gx) {
  parallel_for(n, [&](int64_t i) { gx[i] = (lo <= x[i] && x[i] <= hi) ? gy[i] : T(0); });
}

template <typename T>
void affine(int64_t n, const T* x, T scale, T shift, T* y) {
  map(n, x, y, [scale, shift](T v) { return scale * v + shift; });
}

template <typename T>
void fill(int64_t n, T value, T* y) {
  parallel_for(n, [&](int64_t i) { y[i] = value; });
}

template <typename T>
void axpy(int64_t n, T alpha, const T* x, T* y) {
  parallel_for(n, [&](int64_t i) { y[i] += alpha * x[i]; });
}

template <typename T>
void binary(BinaryOp op, int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
            const int64_t* b_strides, T* out) {
  const std::optional<BinaryOp> vector_op = simd::has_binary(op) ? std::optional(op) : std::nullopt;
  auto apply = [&](auto f) { broadcast_apply(ndim, out_shape, a, a_strides, b, b_strides, out, f, vector_op); };
  switch (op) {
    case BinaryOp::add: apply([](T u, T v) { return u + v; }); break;
    case BinaryOp::sub: apply([](T u, T v) { return u - v; }); break;
    case BinaryOp::mul: apply([](T u, T v) { return u * v; }); break;
    case BinaryOp::div: apply([](T u, T v) { return u / v; }); break;
    case BinaryOp::pow: apply([](T u, T v) { return std::pow(u, v); }); break;
    case BinaryOp::maximum: apply([](T u, T v) { return nan_max(u, v); }); break;
    case BinaryOp::minimum: apply([](T u, T v) { return nan_min(u, v); }); break;
  }
}

template <typename T>
void compare(CompareOp op, int ndim, const int64_t* out_shape, const T* a, const int64_t* a_strides, const T* b,
             const int64_t* b_strides, uint8_t* out) {
  auto apply = [&](auto f) { broadcast_apply(ndim, out_shape, a, a_strides, b, b_strides, out, f); };
  switch (op) {
    case CompareOp::eq: apply([](T u, T v) { return static_cast<uint8_t>(u == v); }); break;
    case CompareOp::ne: apply([](T u, T v) { return static_cast<uint8_t>(u != v); }); break;
    case CompareOp::lt: apply([](T u, T v) { return static_cast<uint8_t>(u < v); }); break;
    case CompareOp::le: apply([](T u, T v) { return static_cast<uint8_t>(u <= v); }); break;
    case CompareOp::gt: apply([](T u, T v) { return static_cast<uint8_t>(u > v); }); break;
    case CompareOp::ge: apply([](T u, T v) { return static_cast<uint8_t>(u >= v); }); break;
  }
}

template <typename T>
void where(int ndim, const int64_t* out_shape, const uint8_t* cond, const int64_t* cond_strides, const T* a,
           const int64_t* a_strides, const T* b, const int64_t* b_strides, T* out) {
  const BroadcastPlan<3> plan = make_plan<3>(ndim, out_shape, {cond_strides, a_strides, b_strides});
  if (plan.numel == 0) return;
  const int64_t sc = plan.strides[0].back();
  const int64_t sa = plan.strides[1].back();
  const int64_t sb = plan.strides[2].back();
  walk(plan, [&](int64_t o, const std::array<int64_t, 3>& off, int64_t len) {
    const uint8_t* pc = cond + off[0];
    const T* pa = a + off[1];
    const T* pb = b + off[2];
    T* po = out + o;
    if (sc == 1 && sa == 1 && sb == 1) {
      for (int64_t i = 0; i < len; ++i) po[i] = pc[i] ? pa[i] : pb[i];
    } else {
      for (int64_t i = 0; i < len; ++i) po[i] = pc[i * sc] ? pa[i * sa] : pb[i * sb];
    }
  });
}

#define SHARDRT_INSTANTIATE_ELEMENTWISE(T)                                                                        \
  template void unary<T>(UnaryOp, int64_t, const T*, T*);                                                         \
  template void unary_backward<T>(UnaryOp, int64_t, const T*, const T*, const T*, T*);                            \
  template void pow_scalar<T>(int64_t, const T*, T, T*);                                                          \
  template void pow_scalar_backward<T>(int64_t, const T*, T, const T*, T*);                                       \
  template void clamp<T>(int64_t, const T*, T, T, T*);                                                            \
  template void clamp_backward<T>(int64_t, const T*, T, T, const T*, T*);                                         \
  template void affine<T>(int64_t, const T*, T, T, T*);                                                           \
  template void fill<T>(int64_t, T, T*);                                                                          \
  template void axpy<T>(int64_t, T, const T*, T*);                                                                \
  template void binary<T>(BinaryOp, int, const int64_t*, const T*, const int64_t*, const T*, const int64_t*, T*); \
  template void compare<T>(CompareOp, int, const int64_t*, const T*, const int64_t*, const T*, const int64_t*,     \
                           uint8_t*);                                                                             \
  template void where<T>(int, const int64_t*, const uint8_t*, const int64_t*, const T*, const int64_t*, const T*,  \
                         const int64_t*, T*);

SHARDRT_INSTANTIATE_ELEMENTWISE(float)
SHARDRT_INSTANTIATE_ELEMENTWISE(double)
#undef SHARDRT_INSTANTIATE_ELEMENTWISE

}  // namespace shardrt::kernels::cpu
