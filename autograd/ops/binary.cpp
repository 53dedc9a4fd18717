// Broadcasting binary ops (add .. minimum), scalar maps (add_scalar, mul_scalar), comparisons and where.
//
// Operands are never copied to the output shape: each is passed to the strided kernels as its broadcast view
// (stride 0 on broadcast dims). The grad of a broadcast operand is the output grad summed back to its shape.
#include <array>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.h"

namespace shardrt {

using namespace ops_detail;
using kernels::BinaryOp;
using kernels::CompareOp;

namespace {

// ---- broadcast geometry ---------------------------------------------------------------------------------------

// What the strided kernels walk: out's shape and each operand's strides in its broadcast view, with size-1 dims
// dropped and neighbouring dims merged where every operand steps through them as one run (out's row-major order is
// unchanged by either). Merging keeps the rank within the CUDA kernels' limit for any realistic broadcast.
template <size_t Arity>
struct StridedLayout {
  Shape shape;
  std::array<Strides, Arity> strides;
  int ndim() const { return static_cast<int>(shape.size()); }
};

template <size_t Arity>
StridedLayout<Arity> strided_layout(const char* name, const Shape& out,
                                    const std::array<const Tensor*, Arity>& operands) {
  std::array<Strides, Arity> full;
  for (size_t k = 0; k < Arity; ++k) full[k] = operands[k]->expand(out).strides();
  StridedLayout<Arity> l;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    bool merge = !l.shape.empty();
    for (size_t k = 0; k < Arity && merge; ++k) merge = l.strides[k].back() == full[k][d] * out[d];
    if (merge) {
      l.shape.back() *= out[d];
      for (size_t k = 0; k < Arity; ++k) l.strides[k].back() = full[k][d];
    } else {
      l.shape.push_back(out[d]);
      for (size_t k = 0; k < Arity; ++k) l.strides[k].push_back(full[k][d]);
    }
  }
  if (operands[0]->device().is_cuda()) {
    constexpr int kMaxCudaDims = 8;
    SHARDRT_CHECK(l.ndim() <= kMaxCudaDims, ShapeError, name, ": a broadcast over ", l.ndim(),
                  " unmergeable dims exceeds the ", kMaxCudaDims, " the cuda kernels take (output ", shape_str(out),
                  ")");
  }
  return l;
}

// ---- launchers: one place per kernel that picks the device ------------------------------------------------

// out = a op b, with a and b read through their broadcast views of out's shape.
void launch_binary(const char* name, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const StridedLayout<2> l = strided_layout<2>(name, out.shape(), {&a, &b});
  dispatch_float(name, out, [&](auto tag) {
    using T = decltype(tag);
    const int64_t *shape = l.shape.data(), *as = l.strides[0].data(), *bs = l.strides[1].data();
    on_device(
        out,
        [&] { kernels::cpu::binary<T>(op, l.ndim(), shape, a.data<T>(), as, b.data<T>(), bs, out.data<T>()); },
        [&](CudaStream s) {
          kernels::cuda::binary<T>(op, l.ndim(), shape, a.data<T>(), as, b.data<T>(), bs, out.data<T>(), s);
        });
  });
}

void launch_compare(const char* name, CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const StridedLayout<2> l = strided_layout<2>(name, out.shape(), {&a, &b});
  auto* result = static_cast<uint8_t*>(out.raw_data());
  dispatch_float(name, a, [&](auto tag) {
    using T = decltype(tag);
    const int64_t *shape = l.shape.data(), *as = l.strides[0].data(), *bs = l.strides[1].data();
    on_device(
        out, [&] { kernels::cpu::compare<T>(op, l.ndim(), shape, a.data<T>(), as, b.data<T>(), bs, result); },
        [&](CudaStream s) {
          kernels::cuda::compare<T>(op, l.ndim(), shape, a.data<T>(), as, b.data<T>(), bs, result, s);
        });
  });
}

// y = scale * x + shift over a contiguous x.
void launch_affine(const char* name, const Tensor& x, double scale, double shift, const Tensor& y) {
  dispatch_float(name, x, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        x, [&] { kernels::cpu::affine<T>(x.numel(), x.data<T>(), T(scale), T(shift), y.data<T>()); },
        [&](CudaStream s) { kernels::cuda::affine<T>(x.numel(), x.data<T>(), T(scale), T(shift), y.data<T>(), s); });
  });
}

void launch_where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  const StridedLayout<3> l = strided_layout<3>("where", out.shape(), {&cond, &a, &b});
  // u8 and bool share the one-byte 0/1 layout the kernel reads.
  const auto* c = static_cast<const uint8_t*>(cond.raw_data());
  dispatch_float("where", out, [&](auto tag) {
    using T = decltype(tag);
    const int64_t *shape = l.shape.data(), *cs = l.strides[0].data(), *as = l.strides[1].data(),
                  *bs = l.strides[2].data();
    on_device(
        out,
        [&] { kernels::cpu::where<T>(l.ndim(), shape, c, cs, a.data<T>(), as, b.data<T>(), bs, out.data<T>()); },
        [&](CudaStream s) {
          kernels::cuda::where<T>(l.ndim(), shape, c, cs, a.data<T>(), as, b.data<T>(), bs, out.data<T>(), s);
        });
  });
}

// Checks two float operands of one device and dtype and returns their broadcast shape.
Shape check_binary(const char* name, const Tensor& a, const Tensor& b) {
  check_float(name, a, "first operand");
  check_float(name, b, "second operand");
  check_compatible(name, {&a, &b});
  return broadcast_for(name, {a.shape(), b.shape()}, {&a, &b});
}

// ---- add, sub, mul, div, pow, maximum, minimum ------------------------------------------------------------

struct BinaryCtx {
  BinaryOp op = BinaryOp::add;
  Shape a_shape, b_shape;
  bool a_needs_grad = false, b_needs_grad = false;
  Tensor a, b, out;  // only those the op's backward reads
};

Tensor binary_forward(BinaryCtx& ctx, const char* name, BinaryOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = check_binary(name, a, b);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  launch_binary(name, op, a, b, out);

  ctx.op = op;
  ctx.a_shape = a.shape();
  ctx.b_shape = b.shape();
  ctx.a_needs_grad = requires_grad(a);
  ctx.b_needs_grad = requires_grad(b);
  switch (op) {
    case BinaryOp::add:
    case BinaryOp::sub: break;
    case BinaryOp::mul:
      if (ctx.a_needs_grad) ctx.b = b.detach();
      if (ctx.b_needs_grad) ctx.a = a.detach();
      break;
    case BinaryOp::div:
      ctx.b = b.detach();
      if (ctx.b_needs_grad) ctx.out = out;
      break;
    case BinaryOp::pow:
      ctx.a = a.detach();
      ctx.b = b.detach();
      if (ctx.b_needs_grad) ctx.out = out;
      break;
    case BinaryOp::maximum:
    case BinaryOp::minimum:
      ctx.a = a.detach();
      ctx.b = b.detach();
      break;
  }
  return out;
}

std::vector<Tensor> binary_backward(BinaryCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor& g = grad_outputs[0];
  Tensor ga, gb;  // in the output's shape; summed back to the operands' shapes below
  switch (ctx.op) {
    case BinaryOp::add:
      ga = g;
      gb = g;
      break;
    case BinaryOp::sub:
      ga = g;
      if (ctx.b_needs_grad) gb = neg(sum_to_shape(g, ctx.b_shape));  // summed first: the smaller tensor
      break;
    case BinaryOp::mul:
      if (ctx.a_needs_grad) ga = mul(g, ctx.b);
      if (ctx.b_needs_grad) gb = mul(g, ctx.a);
      break;
    case BinaryOp::div: {
      // d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -(1/b)(a/b) = -(1/b) out.
      Tensor g_over_b = div(g, ctx.b);
      ga = g_over_b;
      if (ctx.b_needs_grad) gb = neg(mul(g_over_b, ctx.out));
      break;
    }
    case BinaryOp::pow:
      // d(a^b)/da = b a^(b-1); d(a^b)/db = a^b log a (needs a > 0).
      if (ctx.a_needs_grad) ga = mul(g, mul(ctx.b, pow(ctx.a, add_scalar(ctx.b, -1.0))));
      if (ctx.b_needs_grad) gb = mul(g, mul(ctx.out, log(ctx.a)));
      break;
    case BinaryOp::maximum:
    case BinaryOp::minimum: {
      // The grad goes to whichever operand was selected; ties go to a.
      Tensor a_selected = ctx.op == BinaryOp::maximum ? ge(ctx.a, ctx.b) : le(ctx.a, ctx.b);
      Tensor zero = scalar_like(g, 0.0);
      if (ctx.a_needs_grad) ga = where(a_selected, g, zero);
      if (ctx.b_needs_grad) gb = where(a_selected, zero, g);
      break;
    }
  }
  std::vector<Tensor> grads(2);
  if (ctx.a_needs_grad) grads[0] = sum_to_shape(ga, ctx.a_shape);
  if (ctx.b_needs_grad) grads[1] = sum_to_shape(gb, ctx.b_shape);
  return grads;
}

Tensor binary_op(const char* name, BinaryOp op, const Tensor& a, const Tensor& b) {
  BinaryCtx ctx;
  Tensor out = binary_forward(ctx, name, op, a, b);
  return record(name, {a, b}, out, std::move(ctx), binary_backward);
}

// ---- add_scalar, mul_scalar -------------------------------------------------------------------------------

struct AffineCtx {
  double scale = 1.0;  // dy/dx
};

Tensor affine_forward(AffineCtx& ctx, const char* name, const Tensor& x, double scale, double shift) {
  check_float(name, x, "input");
  Tensor y = empty_like(x);
  launch_affine(name, x.contiguous(), scale, shift, y);
  ctx.scale = scale;
  return y;
}

std::vector<Tensor> affine_backward(AffineCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  if (ctx.scale == 1.0) return {grad_outputs[0]};
  return {mul_scalar(grad_outputs[0], ctx.scale)};
}

// ---- comparisons --------------------------------------------------------------------------------------------

Tensor compare_op(const char* name, CompareOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = check_binary(name, a, b);
  Tensor out = Tensor::empty(shape, DType::u8, a.device());
  launch_compare(name, op, a, b, out);
  return out;
}

// ---- where ----------------------------------------------------------------------------------------------------

struct WhereCtx {
  Tensor cond;
  Shape a_shape, b_shape;
  bool a_needs_grad = false, b_needs_grad = false;
};

Tensor where_forward(WhereCtx& ctx, const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined("where", cond, "condition");
  SHARDRT_CHECK(cond.dtype() == DType::u8 || cond.dtype() == DType::boolean, DTypeError,
                "where: the condition must be u8 or bool, got ", cond.str());
  check_float("where", a, "first operand");
  check_float("where", b, "second operand");
  check_compatible("where", {&a, &b});
  check_same_device("where", cond, a);
  const Shape shape = broadcast_for("where", {cond.shape(), a.shape(), b.shape()}, {&cond, &a, &b});
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  launch_where(cond, a, b, out);
  ctx.cond = cond.detach();
  ctx.a_shape = a.shape();
  ctx.b_shape = b.shape();
  ctx.a_needs_grad = requires_grad(a);
  ctx.b_needs_grad = requires_grad(b);
  return out;
}

std::vector<Tensor> where_backward(WhereCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor& g = grad_outputs[0];
  Tensor zero = scalar_like(g, 0.0);
  std::vector<Tensor> grads(2);
  if (ctx.a_needs_grad) grads[0] = sum_to_shape(where(ctx.cond, g, zero), ctx.a_shape);
  if (ctx.b_needs_grad) grads[1] = sum_to_shape(where(ctx.cond, zero, g), ctx.b_shape);
  return grads;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_op("add", BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op("sub", BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op("mul", BinaryOp::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op("div", BinaryOp::div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op("pow", BinaryOp::pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op("maximum", BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op("minimum", BinaryOp::minimum, a, b); }

Tensor add_scalar(const Tensor& x, double s) {
  AffineCtx ctx;
  Tensor y = affine_forward(ctx, "add_scalar", x, 1.0, s);
  return record("add_scalar", {x}, y, std::move(ctx), affine_backward);
}

Tensor mul_scalar(const Tensor& x, double s) {
  AffineCtx ctx;
  Tensor y = affine_forward(ctx, "mul_scalar", x, s, 0.0);
  return record("mul_scalar", {x}, y, std::move(ctx), affine_backward);
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare_op("eq", CompareOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_op("ne", CompareOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_op("lt", CompareOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_op("le", CompareOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_op("gt", CompareOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_op("ge", CompareOp::ge, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  WhereCtx ctx;
  Tensor out = where_forward(ctx, cond, a, b);
  return record("where", {a, b}, out, std::move(ctx), where_backward);
}

}  // namespace shardrt
