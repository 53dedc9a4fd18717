// Differentiable indexing: index_select, gather and scatter_add, on the CPU and CUDA index kernels.
//
// The kernels work on the (outer, n, inner) view of the indexed dim and do not bounds-check, so every index
// value is checked here first. gather and scatter_add follow PyTorch: the index may be smaller than the other
// tensors on every dim, and only the leading region it covers takes part. That region (a view narrowed to the
// index's extents) is made contiguous so that the kernels see one (outer, n, inner) layout for all operands.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "kernels/cpu/index.h"
#include "kernels/cuda/index.h"
#include "runtime/cuda_capture.h"
#include "runtime/factories.h"

namespace shardrt {

using namespace ops_detail;

namespace {

// ---- validation -----------------------------------------------------------------------------------------------------

// index must be i64 on x's device.
void check_index_tensor(const char* op, const Tensor& x, const Tensor& index) {
  check_defined(op, index, "index");
  SHARDRT_CHECK(index.dtype() == DType::i64, DTypeError, op, ": index must be i64, got ", index.str());
  check_same_device(op, x, index);
}

// ValueError naming the first index value outside [0, n), which indexes dim `dim` of x.
// A CUDA index is read on the host for this check (one device-to-host copy, which waits for the index). Inside a
// CUDA graph capture that read is forbidden: the check is then a kernel that raises the device's index error flag
// (kernels/cuda/index.h), which the captured step reads after its replay (optim/captured_step.h), and the kernels
// themselves ignore an out-of-range index safely.
void check_index_values(const char* op, const Tensor& index, int64_t n, int dim, const Tensor& x) {
  if (index.device().is_cuda() && stream_capturing(index.device().index)) {
    const int dev = index.device().index;
    const Tensor ic = index.contiguous();
    kernels::cuda::check_index_bounds(ic.numel(), ic.data<int64_t>(), n, kernels::cuda::index_error_flag(dev),
                                      current_stream(dev));
    return;
  }
  Tensor ic = index.to(Device::cpu()).contiguous();
  const int64_t* values = ic.data<int64_t>();
  for (int64_t i = 0; i < ic.numel(); ++i)
    SHARDRT_CHECK(values[i] >= 0 && values[i] < n, ValueError, op, ": index value ", values[i], " (at flat position ",
                  i, " of ", index.str(), ") is out of range [0, ", n, ") for dim ", dim, " of ", x.str());
}

// ---- the leading region an index covers ---------------------------------------------------------------------------

// t narrowed to [0, extents[d]) on every dim d except `keep_dim` (-1 narrows every dim).
Tensor leading_region(const Tensor& t, const Shape& extents, int keep_dim) {
  Tensor r = t;
  for (int d = 0; d < t.dim(); ++d)
    if (d != keep_dim) r = r.narrow(d, 0, extents[d]);
  return r;
}

// out[..., j, ...] = src[..., index[..., j, ...], ...] along dim, out with index's shape; src is read only on the
// region the index covers.
Tensor gather_region(const Tensor& src, int dim, const Tensor& index) {
  Tensor s = leading_region(src, index.shape(), dim).contiguous();
  Tensor ic = index.contiguous();
  Tensor out = Tensor::empty(index.shape(), src.dtype(), src.device());
  const DimView v = dim_view(index.shape(), dim);
  const int64_t n_src = src.size(dim);
  dispatch_float("gather", src, [&](auto tag) {
    using T = decltype(tag);
    const int64_t* idx = ic.data<int64_t>();
    on_device(
        src, [&] { kernels::cpu::gather<T>(v.outer, n_src, v.inner, s.data<T>(), v.n, idx, out.data<T>()); },
        [&](CudaStream st) {
          kernels::cuda::gather<T>(v.outer, n_src, v.inner, s.data<T>(), v.n, idx, out.data<T>(), st);
        });
  });
  return out;
}

// dst[..., index[..., j, ...], ...] += src[..., j, ...] along dim, in place; src has index's shape. dst is written
// through a contiguous copy of the covered region when that region is not contiguous itself.
void scatter_add_region(const Tensor& dst, int dim, const Tensor& index, const Tensor& src) {
  Tensor region = leading_region(dst, index.shape(), dim);
  Tensor d = region.contiguous();
  Tensor s = src.contiguous();
  Tensor ic = index.contiguous();
  const DimView v = dim_view(index.shape(), dim);
  const int64_t n_dst = dst.size(dim);
  dispatch_float("scatter_add", dst, [&](auto tag) {
    using T = decltype(tag);
    const int64_t* idx = ic.data<int64_t>();
    on_device(
        dst, [&] { kernels::cpu::scatter_add<T>(v.outer, n_dst, v.inner, d.data<T>(), v.n, idx, s.data<T>()); },
        [&](CudaStream st) {
          kernels::cuda::scatter_add<T>(v.outer, n_dst, v.inner, d.data<T>(), v.n, idx, s.data<T>(), st);
        });
  });
  if (!d.is_same(region)) region.copy_(d);
}

// ---- index_select -------------------------------------------------------------------------------------------------

struct IndexSelectCtx {
  Shape in_shape;
  int dim = 0;
  Tensor index;  // contiguous
};

Tensor index_select_forward(IndexSelectCtx& ctx, const Tensor& x, int dim_in, const Tensor& index) {
  const char* op = "index_select";
  check_float(op, x, "input");
  check_index_tensor(op, x, index);
  const int dim = wrap_dim(dim_in, x.dim(), op);
  SHARDRT_CHECK(index.dim() == 1, ShapeError, op, ": index must be 1-D, got ", index.str());
  check_index_values(op, index, x.size(dim), dim, x);
  ctx.in_shape = x.shape();
  ctx.dim = dim;
  ctx.index = index.contiguous();
  Shape out_shape = x.shape();
  out_shape[dim] = index.numel();
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  const DimView v = dim_view(x.shape(), dim);
  dispatch_float(op, x, [&](auto tag) {
    using T = decltype(tag);
    const int64_t* idx = ctx.index.data<int64_t>();
    on_device(
        x,
        [&] {
          kernels::cpu::index_select<T>(v.outer, v.n, v.inner, xc.data<T>(), index.numel(), idx, out.data<T>());
        },
        [&](CudaStream st) {
          kernels::cuda::index_select<T>(v.outer, v.n, v.inner, xc.data<T>(), index.numel(), idx, out.data<T>(), st);
        });
  });
  return out;
}

// Each selected row's grad goes back to the row it was read from; repeated indices add up.
std::vector<Tensor> index_select_backward(IndexSelectCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = zeros(ctx.in_shape, {gy.dtype(), gy.device()});
  const DimView v = dim_view(ctx.in_shape, ctx.dim);
  dispatch_float("index_select", gy, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n_idx = ctx.index.numel();
    const int64_t* idx = ctx.index.data<int64_t>();
    on_device(
        gy, [&] { kernels::cpu::index_add<T>(v.outer, v.n, v.inner, gx.data<T>(), n_idx, idx, gy.data<T>()); },
        [&](CudaStream st) {
          kernels::cuda::index_add<T>(v.outer, v.n, v.inner, gx.data<T>(), n_idx, idx, gy.data<T>(), st);
        });
  });
  return {gx};
}

// ---- gather ----------------------------------------------------------------------------------------------------------

struct GatherCtx {
  Shape in_shape;
  int dim = 0;
  Tensor index;
};

// index has x's rank and may not exceed x on the dims other than `dim`.
void check_gather_index(const char* op, const Tensor& x, int dim, const Tensor& index) {
  SHARDRT_CHECK(index.dim() == x.dim(), ShapeError, op, ": index ", index.str(), " must have the rank of ", x.str());
  for (int d = 0; d < x.dim(); ++d)
    SHARDRT_CHECK(d == dim || index.size(d) <= x.size(d), ShapeError, op, ": index ", index.str(),
                  " is larger than ", x.str(), " in dim ", d);
}

Tensor gather_forward(GatherCtx& ctx, const Tensor& x, int dim_in, const Tensor& index) {
  const char* op = "gather";
  check_float(op, x, "input");
  check_index_tensor(op, x, index);
  const int dim = wrap_dim(dim_in, x.dim(), op);
  check_gather_index(op, x, dim, index);
  check_index_values(op, index, x.size(dim), dim, x);
  ctx.in_shape = x.shape();
  ctx.dim = dim;
  ctx.index = index.contiguous();
  return gather_region(x, dim, index);
}

// The adjoint of a gather is a scatter-add of the grad into zeros.
std::vector<Tensor> gather_backward(GatherCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor& gy = grad_outputs[0];
  Tensor gx = zeros(ctx.in_shape, {gy.dtype(), gy.device()});
  scatter_add_region(gx, ctx.dim, ctx.index, gy);
  return {gx};
}

// ---- scatter_add -----------------------------------------------------------------------------------------------------

struct ScatterAddCtx {
  Shape src_shape;
  int dim = 0;
  Tensor index;
};

Tensor scatter_add_forward(ScatterAddCtx& ctx, const Tensor& x, int dim_in, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add";
  check_float(op, x, "input");
  check_float(op, src, "src");
  check_compatible(op, {&x, &src});
  check_index_tensor(op, x, index);
  const int dim = wrap_dim(dim_in, x.dim(), op);
  check_gather_index(op, x, dim, index);
  SHARDRT_CHECK(src.dim() == index.dim(), ShapeError, op, ": src ", src.str(), " must have the rank of index ",
                index.str());
  for (int d = 0; d < src.dim(); ++d)
    SHARDRT_CHECK(index.size(d) <= src.size(d), ShapeError, op, ": index ", index.str(), " is larger than src ",
                  src.str(), " in dim ", d);
  check_index_values(op, index, x.size(dim), dim, x);
  ctx.src_shape = src.shape();
  ctx.dim = dim;
  ctx.index = index.contiguous();
  Tensor out = x.clone();
  scatter_add_region(out, dim, index, leading_region(src, index.shape(), -1));
  return out;
}

// out = x + (scattered src): x's grad passes through; src's grad is the output grad gathered at the index, on
// the region of src the index covers, and zero elsewhere.
std::vector<Tensor> scatter_add_backward(ScatterAddCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor& gy = grad_outputs[0];
  Tensor covered = gather_region(gy, ctx.dim, ctx.index);
  if (covered.shape() == ctx.src_shape) return {gy, covered};
  Tensor gsrc = zeros(ctx.src_shape, {gy.dtype(), gy.device()});
  leading_region(gsrc, ctx.index.shape(), -1).copy_(covered);
  return {gy, gsrc};
}

}  // namespace

Tensor index_select(const Tensor& x, int dim, const Tensor& index) {
  IndexSelectCtx ctx;
  Tensor out = index_select_forward(ctx, x, dim, index);
  return record("index_select", {x}, out, std::move(ctx), index_select_backward);
}

Tensor gather(const Tensor& x, int dim, const Tensor& index) {
  GatherCtx ctx;
  Tensor out = gather_forward(ctx, x, dim, index);
  return record("gather", {x}, out, std::move(ctx), gather_backward);
}

Tensor scatter_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src) {
  ScatterAddCtx ctx;
  Tensor out = scatter_add_forward(ctx, x, dim, index, src);
  return record("scatter_add", {x, src}, out, std::move(ctx), scatter_add_backward);
}

}  // namespace shardrt
