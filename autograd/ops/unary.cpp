// Elementwise maps of one tensor (neg .. sigmoid through the unary kernels; pow_scalar, clamp) and to_dtype.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.h"

namespace shardrt {

using namespace ops_detail;
using kernels::UnaryOp;

namespace {

// ---- launchers (x, y, gy, gx contiguous) --------------------------------------------------------------------

void launch_unary(const char* name, UnaryOp op, const Tensor& x, const Tensor& y) {
  dispatch_float(name, x, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        x, [&] { kernels::cpu::unary<T>(op, x.numel(), x.data<T>(), y.data<T>()); },
        [&](CudaStream s) { kernels::cuda::unary<T>(op, x.numel(), x.data<T>(), y.data<T>(), s); });
  });
}

void launch_unary_backward(const char* name, UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                           const Tensor& gx) {
  dispatch_float(name, gy, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = gy.numel();
    on_device(
        gy, [&] { kernels::cpu::unary_backward<T>(op, n, x.data<T>(), y.data<T>(), gy.data<T>(), gx.data<T>()); },
        [&](CudaStream s) {
          kernels::cuda::unary_backward<T>(op, n, x.data<T>(), y.data<T>(), gy.data<T>(), gx.data<T>(), s);
        });
  });
}

void launch_pow_scalar(const Tensor& x, double p, const Tensor& y) {
  dispatch_float("pow_scalar", x, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        x, [&] { kernels::cpu::pow_scalar<T>(x.numel(), x.data<T>(), T(p), y.data<T>()); },
        [&](CudaStream s) { kernels::cuda::pow_scalar<T>(x.numel(), x.data<T>(), T(p), y.data<T>(), s); });
  });
}

void launch_pow_scalar_backward(const Tensor& x, double p, const Tensor& gy, const Tensor& gx) {
  dispatch_float("pow_scalar", x, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        x, [&] { kernels::cpu::pow_scalar_backward<T>(x.numel(), x.data<T>(), T(p), gy.data<T>(), gx.data<T>()); },
        [&](CudaStream s) {
          kernels::cuda::pow_scalar_backward<T>(x.numel(), x.data<T>(), T(p), gy.data<T>(), gx.data<T>(), s);
        });
  });
}

void launch_clamp(const Tensor& x, double lo, double hi, const Tensor& y) {
  dispatch_float("clamp", x, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        x, [&] { kernels::cpu::clamp<T>(x.numel(), x.data<T>(), T(lo), T(hi), y.data<T>()); },
        [&](CudaStream s) { kernels::cuda::clamp<T>(x.numel(), x.data<T>(), T(lo), T(hi), y.data<T>(), s); });
  });
}

void launch_clamp_backward(const Tensor& x, double lo, double hi, const Tensor& gy, const Tensor& gx) {
  dispatch_float("clamp", x, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        x,
        [&] { kernels::cpu::clamp_backward<T>(x.numel(), x.data<T>(), T(lo), T(hi), gy.data<T>(), gx.data<T>()); },
        [&](CudaStream s) {
          kernels::cuda::clamp_backward<T>(x.numel(), x.data<T>(), T(lo), T(hi), gy.data<T>(), gx.data<T>(), s);
        });
  });
}

// ---- the unary-kernel maps ------------------------------------------------------------------------------------

// Maps whose derivative the kernel computes from the output y alone: saving y lets x be freed.
bool derivative_from_output(UnaryOp op) {
  return op == UnaryOp::exp || op == UnaryOp::sqrt || op == UnaryOp::rsqrt || op == UnaryOp::tanh ||
         op == UnaryOp::sigmoid;
}

struct UnaryCtx {
  const char* name = "";
  UnaryOp op = UnaryOp::neg;
  Tensor saved;  // y when derivative_from_output(op), else x (nothing for neg)
};

Tensor unary_forward(UnaryCtx& ctx, const char* name, UnaryOp op, const Tensor& x) {
  check_float(name, x, "input");
  Tensor xc = x.contiguous();
  Tensor y = empty_like(x);
  launch_unary(name, op, xc, y);
  ctx.name = name;
  ctx.op = op;
  if (derivative_from_output(op)) ctx.saved = y;
  else if (op != UnaryOp::neg) ctx.saved = xc.detach();
  return y;
}

std::vector<Tensor> unary_backward(UnaryCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  if (ctx.op == UnaryOp::neg) return {neg(grad_outputs[0])};
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = empty_like(gy);
  // The kernel reads only the one of x and y the derivative needs; the saved tensor stands in for both pointers.
  launch_unary_backward(ctx.name, ctx.op, ctx.saved, ctx.saved, gy, gx);
  return {gx};
}

Tensor unary_op(const char* name, UnaryOp op, const Tensor& x) {
  UnaryCtx ctx;
  Tensor y = unary_forward(ctx, name, op, x);
  return record(name, {x}, y, std::move(ctx), unary_backward);
}

// ---- pow_scalar -----------------------------------------------------------------------------------------------

struct PowScalarCtx {
  Tensor x;
  double p = 1.0;
};

Tensor pow_scalar_forward(PowScalarCtx& ctx, const Tensor& x, double p) {
  check_float("pow_scalar", x, "input");
  Tensor xc = x.contiguous();
  Tensor y = empty_like(x);
  launch_pow_scalar(xc, p, y);
  ctx.x = xc.detach();
  ctx.p = p;
  return y;
}

std::vector<Tensor> pow_scalar_backward(PowScalarCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = empty_like(gy);
  launch_pow_scalar_backward(ctx.x, ctx.p, gy, gx);
  return {gx};
}

// ---- clamp ----------------------------------------------------------------------------------------------------

struct ClampCtx {
  Tensor x;
  double lo = 0.0, hi = 0.0;
};

Tensor clamp_forward(ClampCtx& ctx, const Tensor& x, double lo, double hi) {
  check_float("clamp", x, "input");
  Tensor xc = x.contiguous();
  Tensor y = empty_like(x);
  launch_clamp(xc, lo, hi, y);
  ctx.x = xc.detach();
  ctx.lo = lo;
  ctx.hi = hi;
  return y;
}

std::vector<Tensor> clamp_backward(ClampCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = empty_like(gy);
  launch_clamp_backward(ctx.x, ctx.lo, ctx.hi, gy, gx);
  return {gx};
}

// ---- to_dtype -------------------------------------------------------------------------------------------------

struct ToDtypeCtx {
  DType input_dtype = DType::f32;
};

Tensor to_dtype_forward(ToDtypeCtx& ctx, const Tensor& x, DType dtype) {
  check_defined("to_dtype", x, "input");
  ctx.input_dtype = x.dtype();
  // detach: even when no conversion is needed the result is a new tensor, never x's autograd identity.
  return x.to(dtype).detach();
}

std::vector<Tensor> to_dtype_backward(ToDtypeCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  return {grad_outputs[0].to(ctx.input_dtype)};
}

}  // namespace

Tensor neg(const Tensor& x) { return unary_op("neg", UnaryOp::neg, x); }
Tensor exp(const Tensor& x) { return unary_op("exp", UnaryOp::exp, x); }
Tensor log(const Tensor& x) { return unary_op("log", UnaryOp::log, x); }
Tensor sqrt(const Tensor& x) { return unary_op("sqrt", UnaryOp::sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary_op("rsqrt", UnaryOp::rsqrt, x); }
Tensor tanh(const Tensor& x) { return unary_op("tanh", UnaryOp::tanh, x); }
Tensor erf(const Tensor& x) { return unary_op("erf", UnaryOp::erf, x); }
Tensor abs(const Tensor& x) { return unary_op("abs", UnaryOp::abs, x); }
Tensor relu(const Tensor& x) { return unary_op("relu", UnaryOp::relu, x); }
Tensor silu(const Tensor& x) { return unary_op("silu", UnaryOp::silu, x); }
Tensor sigmoid(const Tensor& x) { return unary_op("sigmoid", UnaryOp::sigmoid, x); }
Tensor gelu(const Tensor& x, GeluApprox approx) {
  return approx == GeluApprox::tanh ? unary_op("gelu", UnaryOp::gelu_tanh, x) : unary_op("gelu", UnaryOp::gelu_erf, x);
}

Tensor pow_scalar(const Tensor& x, double p) {
  PowScalarCtx ctx;
  Tensor y = pow_scalar_forward(ctx, x, p);
  return record("pow_scalar", {x}, y, std::move(ctx), pow_scalar_backward);
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  ClampCtx ctx;
  Tensor y = clamp_forward(ctx, x, lo, hi);
  return record("clamp", {x}, y, std::move(ctx), clamp_backward);
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  ToDtypeCtx ctx;
  Tensor y = to_dtype_forward(ctx, x, dtype);
  if (!is_floating(dtype)) return y;  // integer results carry no grad
  return record("to_dtype", {x}, y, std::move(ctx), to_dtype_backward);
}

}  // namespace shardrt
