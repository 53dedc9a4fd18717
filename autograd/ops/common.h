// Shared plumbing for the op files: the device switch, dtype dispatch, argument checks, the (outer, n, inner)
// view of a dim, and summing a broadcast grad back to an operand's shape.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "runtime/cuda_context.h"
#include "runtime/errors.h"
#include "runtime/tensor.h"

namespace shardrt::ops_detail {

// The backend seam: an op's launch is one call with a CPU branch and a CUDA branch, no preprocessor. cpu() runs
// for a CPU tensor; cuda(stream) for a CUDA tensor, with the ShardRT stream of t's device (its kernels are queued
// there, never synchronised). kernels/cuda/*.h exist in every build, so the CUDA branch always compiles; a build
// without CUDA cannot hold a CUDA tensor, and its kernels/cuda/unavailable.cpp throws DeviceError if reached.
template <typename CpuFn, typename CudaFn>
void on_device(const Tensor& t, CpuFn&& cpu, CudaFn&& cuda) {
  if (t.device().is_cpu()) std::forward<CpuFn>(cpu)();
  else std::forward<CudaFn>(cuda)(current_stream(t.device().index));
}

// For op families with a CPU kernel only (marked "(cpu)" in autograd/ops.h): DeviceError naming the op and the
// tensor, e.g. "group_norm: no CUDA kernel yet (input f32[2, 4, 8] cuda:0)", when t is on a CUDA device. Nothing
// is copied to the host behind the caller's back.
void cpu_kernel_only(const char* op, const Tensor& t, const char* what = "input");

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
// A tensor of `shape`, dtype and device whose data lives elsewhere (a sharded op's GLOBAL tensor): one element,
// broadcast with stride 0. The checks here take it like any tensor, so a sharded op raises, before it plans or
// communicates, the local op's error for the global tensor — the same type and message on every rank.
Tensor shape_stand_in(const Shape& shape, DType dtype, Device device);
// Throws unless all defined tensors share a dtype and a device.
void check_compatible(const char* op, std::initializer_list<const Tensor*> ts);

// A dim of t wrapped into [0, t.dim()); ShapeError naming op and t.str() when out of range.
int wrap_dim_of(const char* op, int dim, const Tensor& t);
// NumPy broadcast of `shapes`; ShapeError naming op and the operands' str() when they do not broadcast.
Shape broadcast_for(const char* op, const std::vector<Shape>& shapes, std::initializer_list<const Tensor*> operands);

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

// A fresh contiguous tensor with t's shape, dtype and device (uninitialised).
Tensor empty_like(const Tensor& t);
// A 0-d tensor holding `value` with t's dtype and device (e.g. the zero that `where` selects).
Tensor scalar_like(const Tensor& t, double value);

// ---- autocast (autograd/autocast.h): the operands of the matmul-class ops ------------------------------------
// The compute dtype a matmul-class op applies to its inputs: the open Autocast scope's bf16 or f16 when every
// defined input is f32; nullopt otherwise (outside a scope, and for f64 — the oracle is never rounded). An op calls
// this once in its forward and keeps the answer in its ctx, so its backward follows the forward's choice.
std::optional<DType> autocast_compute(std::initializer_list<const Tensor*> inputs);

// How a kernel reads rounded operands. `f32_rounded`: f32 tensors holding values exactly representable in the
// compute dtype — every CPU kernel (bf16 and f16 values multiply exactly in f32, so an f32 GEMM with f32
// accumulation over them gives the products a 16-bit GEMM gives) and cuDNN's f32 convolution. `sixteen_bit`:
// tensors of the compute dtype itself, for the CUDA kernels that read 16-bit storage and accumulate in f32
// (cuBLAS with CUBLAS_COMPUTE_32F, the bf16/f16 attention kernel).
enum class OperandForm { f32_rounded, sixteen_bit };
// The form the GEMM and attention kernels of t's device read: f32_rounded on the CPU, sixteen_bit on CUDA.
OperandForm kernel_operand_form(const Tensor& t);
// t (f32) rounded to `compute` (round to nearest even, as runtime/half.h) in `form`: contiguous, without autograd
// history. The one place an op rounds an operand.
Tensor round_operand(const Tensor& t, DType compute, OperandForm form);

// ---- (B, C, *spatial) tensors: convolution, pooling, upsampling -------------------------------------------
// The number of spatial dims of a (B, C, *spatial) tensor, 1-3; ShapeError naming `op` otherwise.
int spatial_dims(const char* op, const Tensor& x);
// A per-spatial-dim argument (stride, padding, ...) given with one entry per spatial dim or one entry for all,
// expanded to nd entries. ValueError naming `op` and `what` when the count is neither, or an entry is below
// `min_value`.
std::vector<int64_t> per_spatial_dim(const char* op, const char* what, const std::vector<int64_t>& values, int nd,
                                     int64_t min_value);

}  // namespace shardrt::ops_detail
