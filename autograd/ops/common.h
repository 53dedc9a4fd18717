// Shared plumbing for the op files: dtype dispatch, argument checks, the (outer, n, inner) view of a dim,
// and summing a broadcast grad back to an operand's shape.
#pragma once
#include <cstdint>
#include <utility>

#include "runtime/errors.h"
#include "runtime/tensor.h"

namespace shardrt::ops_detail {

// Calls f(T{}) with T = float or double for the dtype; DTypeError naming `op` otherwise.
template <typename F>
decltype(auto) dispatch_float(const char* op, const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::f32: return std::forward<F>(f)(float{});
    case DType::f64: return std::forward<F>(f)(double{});
    default:
      throw DTypeError(detail::concat(op, ": expected an f32 or f64 tensor, got ", t.str(),
                                      " (cast 16-bit tensors with to_dtype first)"));
  }
}

// Throws unless t is defined and floating (f32/f64).
void check_float(const char* op, const Tensor& t, const char* what);
// Throws unless all defined tensors share a dtype and a device.
void check_compatible(const char* op, std::initializer_list<const Tensor*> ts);
[[noreturn]] void not_on_cuda(const char* op);

// The (outer, n, inner) view of dimension `dim` of a shape.
struct DimView {
  int64_t outer = 1, n = 1, inner = 1;
};
DimView dim_view(const Shape& shape, int dim);

// Sums `g` over the dims that were broadcast to reach g's shape from `shape` (leading extra dims, and dims of
// size 1 in `shape`). Not recorded on the tape: backward functions use it.
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

// Sum over one dim keeping it with size 1 (CPU and CUDA, f32/f64); not recorded.
Tensor sum_dim_keep(const Tensor& x, int dim);

}  // namespace shardrt::ops_detail
