// Differentiable shape ops.
//
// The views (reshape, view, permute, transpose, narrow, select, unsqueeze, squeeze, expand) run the Tensor view
// method forward, so their outputs share the input's storage, and move the grad back by the adjoint of the
// view: a reshape back, the inverse permutation, a zero tensor holding the grad in the same window, or a sum
// over the broadcast dims. These ops accept any dtype (only floating outputs carry grad). cat and split copy
// through narrow() windows with copy_, which works on every device; pad runs the CPU pad kernels.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "autograd/ops/window_args.h"
#include "kernels/cpu/shape_ops.h"
#include "kernels/cuda/shape_ops.h"
#include "runtime/factories.h"

namespace shardrt {

using namespace ops_detail;

namespace {

// ---- regrouping views: reshape, view, unsqueeze, squeeze --------------------------------------------------------

// These only regroup the elements, so the grad is the output grad regrouped to the input's shape.
struct ReshapeCtx {
  Shape in_shape;
};

std::vector<Tensor> reshape_backward(ReshapeCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  return {grad_outputs[0].reshape(ctx.in_shape)};
}

// ---- permute, transpose -------------------------------------------------------------------------------------------

struct PermuteCtx {
  std::vector<int> inverse;  // inverse[d] = position of input dim d in the output
};

std::vector<Tensor> permute_backward(PermuteCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  return {grad_outputs[0].permute(ctx.inverse)};
}

// ---- narrow, select ---------------------------------------------------------------------------------------------------

struct NarrowCtx {
  Shape in_shape;
  int dim = 0;
  int64_t start = 0, length = 0;
};

std::vector<Tensor> narrow_backward(NarrowCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor& g = grad_outputs[0];
  Tensor gx = zeros(ctx.in_shape, {g.dtype(), g.device()});
  gx.narrow(ctx.dim, ctx.start, ctx.length).copy_(g);
  return {gx};
}

struct SelectCtx {
  Shape in_shape;
  int dim = 0;
  int64_t index = 0;
};

std::vector<Tensor> select_backward(SelectCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor& g = grad_outputs[0];
  Tensor gx = zeros(ctx.in_shape, {g.dtype(), g.device()});
  gx.select(ctx.dim, ctx.index).copy_(g);
  return {gx};
}

// ---- expand, contiguous -----------------------------------------------------------------------------------------------

struct ExpandCtx {
  Shape in_shape;
};

// Every input element was read once per position it was broadcast to: sum the grad over those positions.
std::vector<Tensor> expand_backward(ExpandCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  return {sum_to_shape(grad_outputs[0], ctx.in_shape)};
}

struct IdentityCtx {};

std::vector<Tensor> identity_backward(IdentityCtx&, const std::vector<Tensor>& grad_outputs) {
  return {grad_outputs[0]};
}

// ---- cat, split -------------------------------------------------------------------------------------------------------

// Copies part p into the window of `out` that starts after parts 0..p-1 along `dim`.
void copy_parts_into(const Tensor& out, int dim, const std::vector<Tensor>& parts) {
  int64_t offset = 0;
  for (const Tensor& part : parts) {
    const int64_t n = part.size(dim);
    out.narrow(dim, offset, n).copy_(part);
    offset += n;
  }
}

// The windows of `x` along `dim` with the given extents, in order.
std::vector<Tensor> windows(const Tensor& x, int dim, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> parts;
  parts.reserve(sizes.size());
  int64_t offset = 0;
  for (int64_t n : sizes) {
    parts.push_back(x.narrow(dim, offset, n));
    offset += n;
  }
  return parts;
}

struct CatCtx {
  int dim = 0;
  std::vector<int64_t> sizes;  // each input's extent along dim
};

// The output shape of cat; every input must have the first one's rank, dtype, device and non-cat extents.
Shape cat_shape(const std::vector<Tensor>& xs, int dim) {
  const Tensor& first = xs[0];
  Shape shape = first.shape();
  shape[dim] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    check_same_dtype("cat", first, x);
    check_same_device("cat", first, x);
    SHARDRT_CHECK(x.dim() == first.dim(), ShapeError, "cat: input ", i, " is ", x.str(), " but input 0 is ",
                  first.str(), "; all inputs need the same rank");
    for (int d = 0; d < x.dim(); ++d)
      SHARDRT_CHECK(d == dim || x.size(d) == first.size(d), ShapeError, "cat: input ", i, " is ", x.str(),
                    " but input 0 is ", first.str(), "; they may differ only in the cat dim ", dim);
    shape[dim] += x.size(dim);
  }
  return shape;
}

Tensor cat_forward(CatCtx& ctx, const std::vector<Tensor>& xs, int dim_in) {
  SHARDRT_CHECK(!xs.empty(), ValueError, "cat: no tensors given");
  for (const Tensor& x : xs) check_defined("cat", x, "input");
  const int dim = wrap_dim(dim_in, xs[0].dim(), "cat");
  Tensor out = Tensor::empty(cat_shape(xs, dim), xs[0].dtype(), xs[0].device());
  copy_parts_into(out, dim, xs);
  ctx.dim = dim;
  for (const Tensor& x : xs) ctx.sizes.push_back(x.size(dim));
  return out;
}

std::vector<Tensor> cat_backward(CatCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  return windows(grad_outputs[0], ctx.dim, ctx.sizes);
}

struct SplitCtx {
  Shape in_shape;
  int dim = 0;
};

std::vector<Tensor> split_forward(SplitCtx& ctx, const Tensor& x, const std::vector<int64_t>& sizes, int dim_in) {
  check_defined("split", x, "input");
  const int dim = wrap_dim(dim_in, x.dim(), "split");
  SHARDRT_CHECK(!sizes.empty(), ValueError, "split: no part sizes given for ", x.str());
  int64_t total = 0;
  for (int64_t n : sizes) {
    SHARDRT_CHECK(n >= 0, ValueError, "split: negative part size in ", shape_str(sizes), " for ", x.str());
    total += n;
  }
  SHARDRT_CHECK(total == x.size(dim), ShapeError, "split: part sizes ", shape_str(sizes), " add up to ", total,
                " but dim ", dim, " of ", x.str(), " has ", x.size(dim));
  ctx.in_shape = x.shape();
  ctx.dim = dim;
  return windows(x, dim, sizes);
}

// The engine hands zeros for parts nobody used, so every grad is defined.
std::vector<Tensor> split_backward(SplitCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor& g0 = grad_outputs[0];
  Tensor gx = Tensor::empty(ctx.in_shape, g0.dtype(), g0.device());
  copy_parts_into(gx, ctx.dim, grad_outputs);
  return {gx};
}

// ---- pad --------------------------------------------------------------------------------------------------------------

struct PadCtx {
  kernels::cpu::PadMode mode = kernels::cpu::PadMode::constant;
  int nd = 0;  // padded trailing dims
  int64_t outer = 1;
  int64_t in[3] = {0, 0, 0}, lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  Shape in_shape;
};

kernels::cpu::PadMode kernel_pad_mode(PadMode mode) {
  switch (mode) {
    case PadMode::constant: return kernels::cpu::PadMode::constant;
    case PadMode::reflect: return kernels::cpu::PadMode::reflect;
    case PadMode::replicate: return kernels::cpu::PadMode::replicate;
    case PadMode::circular: return kernels::cpu::PadMode::circular;
  }
  throw ValueError("pad: unknown pad mode");
}

// Validates the pads and fills ctx with the kernel's view of them; returns the output shape.
Shape plan_pad(PadCtx& ctx, const Tensor& x, const std::vector<int64_t>& pads, PadMode mode) {
  check_pad_args(x, pads, mode);
  const int nd = static_cast<int>(pads.size() / 2);
  ctx.mode = kernel_pad_mode(mode);
  ctx.nd = nd;
  ctx.in_shape = x.shape();
  Shape out_shape = x.shape();
  const int lead = x.dim() - nd;
  for (int d = 0; d < lead; ++d) ctx.outer *= x.size(d);
  for (int d = 0; d < nd; ++d) {
    // pads lists the last dim first.
    const int64_t in = x.size(lead + d), lo = pads[2 * (nd - 1 - d)], hi = pads[2 * (nd - 1 - d) + 1];
    const int64_t out = in + lo + hi;
    ctx.in[d] = in;
    ctx.lo[d] = lo;
    ctx.hi[d] = hi;
    out_shape[lead + d] = out;
  }
  return out_shape;
}

Tensor pad_forward(PadCtx& ctx, const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  const Shape out_shape = plan_pad(ctx, x, pads, mode);
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  dispatch_float("pad", x, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = xc.data<T>();
    T* yp = y.data<T>();
    on_device(
        x, [&] { kernels::cpu::pad<T>(ctx.mode, ctx.nd, ctx.outer, ctx.in, ctx.lo, ctx.hi, T(value), xp, yp); },
        [&](CudaStream s) {
          kernels::cuda::pad<T>(ctx.mode, ctx.nd, ctx.outer, ctx.in, ctx.lo, ctx.hi, T(value), xp, yp, s);
        });
  });
  return y;
}

// Each output element came from at most one input element (none for the constant fill): add it back there.
std::vector<Tensor> pad_backward(PadCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = Tensor::empty(ctx.in_shape, gy.dtype(), gy.device());
  dispatch_float("pad", gy, [&](auto tag) {
    using T = decltype(tag);
    const T* gyp = gy.data<T>();
    T* gxp = gx.data<T>();
    on_device(
        gy, [&] { kernels::cpu::pad_backward<T>(ctx.mode, ctx.nd, ctx.outer, ctx.in, ctx.lo, ctx.hi, gyp, gxp); },
        [&](CudaStream s) {
          kernels::cuda::pad_backward<T>(ctx.mode, ctx.nd, ctx.outer, ctx.in, ctx.lo, ctx.hi, gyp, gxp, s);
        });
  });
  return {gx};
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined("reshape", x, "input");
  return record("reshape", {x}, x.reshape(shape), ReshapeCtx{x.shape()}, reshape_backward);
}

Tensor view(const Tensor& x, const Shape& shape) {
  check_defined("view", x, "input");
  return record("view", {x}, x.view(shape), ReshapeCtx{x.shape()}, reshape_backward);
}

Tensor unsqueeze(const Tensor& x, int dim) {
  check_defined("unsqueeze", x, "input");
  return record("unsqueeze", {x}, x.unsqueeze(dim), ReshapeCtx{x.shape()}, reshape_backward);
}

Tensor squeeze(const Tensor& x, int dim) {
  check_defined("squeeze", x, "input");
  return record("squeeze", {x}, x.squeeze(dim), ReshapeCtx{x.shape()}, reshape_backward);
}

Tensor permute(const Tensor& x, const std::vector<int>& dims) {
  check_defined("permute", x, "input");
  Tensor y = x.permute(dims);  // validates dims
  PermuteCtx ctx{std::vector<int>(dims.size())};
  for (size_t i = 0; i < dims.size(); ++i) ctx.inverse[wrap_dim(dims[i], x.dim(), "permute")] = static_cast<int>(i);
  return record("permute", {x}, y, std::move(ctx), permute_backward);
}

Tensor transpose(const Tensor& x, int d0, int d1) {
  check_defined("transpose", x, "input");
  Tensor y = x.transpose(d0, d1);  // validates the dims
  // A swap is its own inverse.
  PermuteCtx ctx{std::vector<int>(x.dim())};
  for (int d = 0; d < x.dim(); ++d) ctx.inverse[d] = d;
  std::swap(ctx.inverse[wrap_dim(d0, x.dim(), "transpose")], ctx.inverse[wrap_dim(d1, x.dim(), "transpose")]);
  return record("transpose", {x}, y, std::move(ctx), permute_backward);
}

Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  check_defined("narrow", x, "input");
  Tensor y = x.narrow(dim, start, length);
  return record("narrow", {x}, y, NarrowCtx{x.shape(), dim, start, length}, narrow_backward);
}

Tensor select(const Tensor& x, int dim, int64_t index) {
  check_defined("select", x, "input");
  Tensor y = x.select(dim, index);
  return record("select", {x}, y, SelectCtx{x.shape(), dim, index}, select_backward);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  check_defined("expand", x, "input");
  return record("expand", {x}, x.expand(shape), ExpandCtx{x.shape()}, expand_backward);
}

Tensor contiguous(const Tensor& x) {
  check_defined("contiguous", x, "input");
  // detach: Tensor::contiguous returns x itself (autograd identity included) when x is already contiguous.
  return record("contiguous", {x}, x.contiguous().detach(), IdentityCtx{}, identity_backward);
}

Tensor cat(const std::vector<Tensor>& xs, int dim) {
  CatCtx ctx;
  Tensor out = cat_forward(ctx, xs, dim);
  return record("cat", xs, out, std::move(ctx), cat_backward);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim) {
  SplitCtx ctx;
  std::vector<Tensor> parts = split_forward(ctx, x, sizes, dim);
  return record("split", {x}, std::move(parts), std::move(ctx), split_backward);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value) {
  PadCtx ctx;
  Tensor y = pad_forward(ctx, x, pads, mode, value);
  return record("pad", {x}, y, std::move(ctx), pad_backward);
}

}  // namespace shardrt
