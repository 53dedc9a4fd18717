// Convolution over 1-3 spatial dims (on the CPU Winograd, oneDNN or im2col + GEMM by shape: kernels/cpu/conv.h; cuDNN on
// CUDA) and the non-overlapping transposed convolution
// that turns patch tokens back into a volume. The ctx keeps x and w (what the weight and input grads need)
// and which inputs want a grad, so that the expensive input grad is skipped for data that needs none.
//
// Autocast (autograd/autocast.h), for f32 x and w inside a bf16/f16 scope, conv and conv_transpose alike:
//   forward   y = conv(round(x), round(w)) + b, accumulated in f32, y f32 (the bias is added in f32);
//   backward  dx, dw from round(dy) and the operands as saved (rounded), in f32; db = sum of the unrounded dy.
// Both backends run their f32 convolution over f32-held rounded values (OperandForm::f32_rounded): on the CPU exact
// 16-bit products with f32 accumulation on the im2col path, f32 transforms and sums on the Winograd and oneDNN
// ones (kernels/cpu/conv.h); on CUDA cuDNN's f32 FMA algorithms over the same
// values — cuDNN's 16-bit configurations write 16-bit outputs, which autocast's f32 output would round away.
#include <climits>
#include <optional>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "autograd/ops/window_args.h"
#include "autograd/tape.h"
#include "kernels/cpu/conv.h"
#include "kernels/cuda/conv.h"
#include "runtime/factories.h"

namespace shardrt {

using namespace ops_detail;

namespace {

using kernels::cpu::ConvGeometry;

struct ConvCtx {
  ConvGeometry geometry{};
  Tensor x, w;  // contiguous, without autograd history; rounded under autocast
  bool grad_x = false, grad_w = false, grad_bias = false;
  std::optional<DType> compute;  // autocast's bf16/f16, chosen in the forward
};

// The GEMMs the kernels issue take 32-bit sizes and leading dims (see kernels/cpu/gemm.h).
void check_blas_extents(const char* op, const Tensor& x, std::initializer_list<int64_t> extents) {
  for (int64_t e : extents)
    SHARDRT_CHECK(e <= INT_MAX, ShapeError, op, ": ", x.str(), " gives a GEMM extent of ", e,
                  ", beyond the 32-bit sizes of the BLAS build");
}

// The kernels take a null pointer for an absent bias and for a grad they need not compute.
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// What both backwards need: the operands (rounded under autocast; the forward computes with these too), and which
// of them want a grad.
void save_operands(ConvCtx& ctx, const Tensor& x, const Tensor& w, const Tensor& bias) {
  ctx.compute = autocast_compute({&x, &w, &bias});
  const auto operand = [&](const Tensor& t) {
    return ctx.compute ? round_operand(t, *ctx.compute, OperandForm::f32_rounded) : t.contiguous().detach();
  };
  ctx.x = operand(x);
  ctx.w = operand(w);
  ctx.grad_x = requires_grad(x);
  ctx.grad_w = requires_grad(w);
  ctx.grad_bias = bias.defined() && requires_grad(bias);
}

// Fills the ctx's geometry for y = conv(x, w) after checking every argument.
void plan_conv(ConvCtx& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride_in,
               const std::vector<int64_t>& padding_in, const std::vector<int64_t>& dilation_in) {
  const char* op = "conv";
  const WindowArgs a = check_conv_args(x, w, bias, stride_in, padding_in, dilation_in);
  const int nd = static_cast<int>(a.kernel.size());
  std::vector<int64_t> in(nd);
  for (int d = 0; d < nd; ++d) in[d] = x.size(2 + d);
  const ConvGeometry g = kernels::cpu::make_conv_geometry(nd, x.size(0), x.size(1), w.size(0), in.data(),
                                                          a.kernel.data(), a.stride.data(), a.padding.data(),
                                                          a.dilation.data());
  const int64_t in_vol = g.in[0] * g.in[1] * g.in[2], out_vol = g.out[0] * g.out[1] * g.out[2];
  check_blas_extents(op, x, {in_vol, out_vol, g.c_in * g.kernel[0] * g.kernel[1] * g.kernel[2], g.c_out});
  ctx.geometry = g;
}

Tensor conv_forward(ConvCtx& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                    const std::vector<int64_t>& dilation) {
  plan_conv(ctx, x, w, bias, stride, padding, dilation);
  const ConvGeometry& g = ctx.geometry;
  save_operands(ctx, x, w, bias);
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Shape out_shape{g.batch, g.c_out};
  for (int d = 0; d < g.nd; ++d) out_shape.push_back(g.out[d]);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  dispatch_float("conv", x, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = ctx.x.data<T>(), *wp = ctx.w.data<T>(), *bp = data_or_null<T>(b);
    on_device(
        x, [&] { kernels::cpu::conv_forward<T>(g, xp, wp, bp, y.data<T>()); },
        [&](CudaStream s) { kernels::cuda::conv_forward<T>(g, xp, wp, bp, y.data<T>(), s); });
  });
  return y;
}

// Undefined where the input wants no grad, so the kernel skips that output. The kernels overwrite the input grad
// and accumulate the parameter grads (kernels/README.md), so those start at zero.
struct ConvGrads {
  Tensor x, w, bias;
};

// The backward's dy for dx and dw: rounded under autocast. The bias grad always sums the unrounded dy, so under
// autocast it is a second kernel call that computes only it.
Tensor grad_operand(const ConvCtx& ctx, const Tensor& gy) {
  return ctx.compute ? round_operand(gy, *ctx.compute, OperandForm::f32_rounded) : gy;
}

ConvGrads allocate_grads(const ConvCtx& ctx) {
  const Tensor& w = ctx.w;
  const TensorOptions like_w{w.dtype(), w.device()};
  return {ctx.grad_x ? empty_like(ctx.x) : Tensor(), ctx.grad_w ? zeros(w.shape(), like_w) : Tensor(),
          ctx.grad_bias ? zeros({ctx.geometry.c_out}, like_w) : Tensor()};
}

std::vector<Tensor> conv_backward(ConvCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  const Tensor gy_op = grad_operand(ctx, gy);
  ConvGrads grads = allocate_grads(ctx);
  dispatch_float("conv", gy, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = ctx.x.data<T>(), *wp = ctx.w.data<T>(), *gyp = gy.data<T>(), *gyp_op = gy_op.data<T>();
    T *gx = data_or_null<T>(grads.x), *gw = data_or_null<T>(grads.w), *gb = data_or_null<T>(grads.bias);
    const auto backward = [&](const T* dy, T* dx, T* dw, T* db) {
      on_device(
          gy, [&] { kernels::cpu::conv_backward<T>(ctx.geometry, xp, wp, dy, dx, dw, db); },
          [&](CudaStream s) { kernels::cuda::conv_backward<T>(ctx.geometry, xp, wp, dy, dx, dw, db, s); });
    };
    if (gyp_op == gyp) {
      backward(gyp, gx, gw, gb);
    } else {
      if (gx || gw) backward(gyp_op, gx, gw, nullptr);
      if (gb) backward(gyp, nullptr, nullptr, gb);
    }
  });
  return {grads.x, grads.w, grads.bias};
}

// ---- transposed convolution with kernel == stride ------------------------------------------------------------------

void plan_conv_transpose(ConvCtx& ctx, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const char* op = "conv_transpose";
  const std::vector<int64_t> kernel = check_conv_transpose_args(x, w, bias);
  const int nd = static_cast<int>(kernel.size());
  const std::vector<int64_t> padding(nd, 0), dilation(nd, 1);
  std::vector<int64_t> in(nd);
  for (int d = 0; d < nd; ++d) in[d] = x.size(2 + d);
  // stride = kernel: every input voxel owns one kernel-sized output block.
  const ConvGeometry g = kernels::cpu::make_conv_geometry(nd, x.size(0), x.size(1), w.size(1), in.data(),
                                                          kernel.data(), kernel.data(), padding.data(),
                                                          dilation.data());
  const int64_t in_vol = g.in[0] * g.in[1] * g.in[2];
  check_blas_extents(op, x, {in_vol, g.c_in, g.c_out * g.kernel[0] * g.kernel[1] * g.kernel[2]});
  ctx.geometry = g;
}

Tensor conv_transpose_forward(ConvCtx& ctx, const Tensor& x, const Tensor& w, const Tensor& bias) {
  plan_conv_transpose(ctx, x, w, bias);
  const ConvGeometry& g = ctx.geometry;
  save_operands(ctx, x, w, bias);
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Shape out_shape{g.batch, g.c_out};
  for (int d = 0; d < g.nd; ++d) out_shape.push_back(g.in[d] * g.kernel[d]);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  dispatch_float("conv_transpose", x, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = ctx.x.data<T>(), *wp = ctx.w.data<T>(), *bp = data_or_null<T>(b);
    on_device(
        x, [&] { kernels::cpu::conv_transpose_patch_forward<T>(g, xp, wp, bp, y.data<T>()); },
        [&](CudaStream s) { kernels::cuda::conv_transpose_patch_forward<T>(g, xp, wp, bp, y.data<T>(), s); });
  });
  return y;
}

std::vector<Tensor> conv_transpose_backward(ConvCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  const Tensor gy_op = grad_operand(ctx, gy);
  ConvGrads grads = allocate_grads(ctx);
  dispatch_float("conv_transpose", gy, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = ctx.x.data<T>(), *wp = ctx.w.data<T>(), *gyp = gy.data<T>(), *gyp_op = gy_op.data<T>();
    T *gx = data_or_null<T>(grads.x), *gw = data_or_null<T>(grads.w), *gb = data_or_null<T>(grads.bias);
    const auto backward = [&](const T* dy, T* dx, T* dw, T* db) {
      on_device(
          gy, [&] { kernels::cpu::conv_transpose_patch_backward<T>(ctx.geometry, xp, wp, dy, dx, dw, db); },
          [&](CudaStream s) {
            kernels::cuda::conv_transpose_patch_backward<T>(ctx.geometry, xp, wp, dy, dx, dw, db, s);
          });
    };
    if (gyp_op == gyp) {
      backward(gyp, gx, gw, gb);
    } else {
      if (gx || gw) backward(gyp_op, gx, gw, nullptr);
      if (gb) backward(gyp, nullptr, nullptr, gb);
    }
  });
  return {grads.x, grads.w, grads.bias};
}

// The fixed-rank wrappers check the rank so that a conv2d on a 5-d tensor is an error, not a 3-d convolution.
Tensor conv_of_rank(const char* op, int nd, const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride,
                    int64_t padding, int64_t dilation) {
  check_defined(op, x, "input");
  SHARDRT_CHECK(x.dim() == nd + 2, ShapeError, op, ": expected (B, C", nd == 1 ? ", L" : nd == 2 ? ", H, W" : ", D, H, W",
                ") input, got ", x.str());
  return conv(x, w, bias, {stride}, {padding}, {dilation});
}

}  // namespace

Tensor conv(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride,
            const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation) {
  ConvCtx ctx;
  Tensor y = conv_forward(ctx, x, w, bias, stride, padding, dilation);
  return record("conv", {x, w, bias}, y, std::move(ctx), conv_backward);
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation) {
  return conv_of_rank("conv1d", 1, x, w, bias, stride, padding, dilation);
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation) {
  return conv_of_rank("conv2d", 2, x, w, bias, stride, padding, dilation);
}

Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation) {
  return conv_of_rank("conv3d", 3, x, w, bias, stride, padding, dilation);
}

Tensor conv_transpose(const Tensor& x, const Tensor& w, const Tensor& bias) {
  ConvCtx ctx;
  Tensor y = conv_transpose_forward(ctx, x, w, bias);
  return record("conv_transpose", {x, w, bias}, y, std::move(ctx), conv_transpose_backward);
}

}  // namespace shardrt
