// layer_norm and group_norm through the norm kernels, which save the per-row (per-group) mean and rstd.
//
// Both backwards are the same formula over each normalised block of D elements, with xhat = (x - mean) rstd and
// gxhat = gy * weight:
//   dx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))
// (the two subtracted terms are the grads that flow through the block's mean and variance), and
//   dweight = sum over blocks of gy * xhat,  dbias = sum over blocks of gy.
// The kernels evaluate it; the ops only shape the tensors and choose which grads to compute. Both run on CPU and
// CUDA (kernels/cuda/norm.cu, kernels/cuda/group_norm.cu).
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "kernels/cpu/norm.h"
#include "kernels/cuda/norm.h"
#include "runtime/factories.h"

namespace shardrt {

using namespace ops_detail;

namespace {

template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Which parameter grads a backward produces, and zero-filled buffers for them (the kernels accumulate with +=).
struct NormGrads {
  Tensor gx, gweight, gbias;
};

NormGrads allocate_norm_grads(const Tensor& gy, bool x_needs, bool weight_needs, bool bias_needs, int64_t params) {
  NormGrads g;
  if (x_needs) g.gx = empty_like(gy);
  if (weight_needs) g.gweight = zeros({params}, {gy.dtype(), gy.device()});
  if (bias_needs) g.gbias = zeros({params}, {gy.dtype(), gy.device()});
  return g;
}

void check_norm_params(const char* name, const Tensor& x, const Tensor& weight, const Tensor& bias,
                       const Shape& param_shape) {
  check_float(name, x, "input");
  if (weight.defined()) check_float(name, weight, "weight");
  if (bias.defined()) check_float(name, bias, "bias");
  check_compatible(name, {&x, &weight, &bias});
  for (const Tensor* p : {&weight, &bias})
    SHARDRT_CHECK(!p->defined() || p->shape() == param_shape, ShapeError, name, ": parameter ", p->str(),
                  " must have shape ", shape_str(param_shape), " for input ", x.str());
}

// ---- layer_norm ---------------------------------------------------------------------------------------------

struct LayerNormCtx {
  Tensor x, weight, mean, rstd;  // x and weight contiguous
  Shape normalized_shape;
  int64_t rows = 0, D = 0;
  bool x_needs_grad = false, weight_needs_grad = false, bias_needs_grad = false;
};

Tensor layer_norm_forward(LayerNormCtx& ctx, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                          const Tensor& bias, double eps) {
  check_norm_params("layer_norm", x, weight, bias, normalized_shape);
  const int nd = static_cast<int>(normalized_shape.size());
  SHARDRT_CHECK(nd >= 1 && nd <= x.dim() && Shape(x.shape().end() - nd, x.shape().end()) == normalized_shape,
                ShapeError, "layer_norm: normalized_shape ", shape_str(normalized_shape),
                " must be non-empty and match the trailing dims of ", x.str());
  ctx.normalized_shape = normalized_shape;
  ctx.D = shape_numel(normalized_shape);
  ctx.rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - nd));
  ctx.x = x.contiguous().detach();
  if (weight.defined()) ctx.weight = weight.contiguous().detach();
  ctx.mean = Tensor::empty({ctx.rows}, x.dtype(), x.device());
  ctx.rstd = Tensor::empty({ctx.rows}, x.dtype(), x.device());
  ctx.x_needs_grad = requires_grad(x);
  ctx.weight_needs_grad = weight.defined() && requires_grad(weight);
  ctx.bias_needs_grad = bias.defined() && requires_grad(bias);
  Tensor y = empty_like(x);
  if (x.numel() == 0) return y;
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  dispatch_float("layer_norm", x, [&](auto tag) {
    using T = decltype(tag);
    const T* w = data_or_null<T>(ctx.weight);
    on_device(
        x,
        [&] {
          kernels::cpu::layernorm<T>(ctx.rows, ctx.D, ctx.x.data<T>(), w, data_or_null<T>(b), T(eps), y.data<T>(),
                                     ctx.mean.data<T>(), ctx.rstd.data<T>());
        },
        [&](CudaStream s) {
          kernels::cuda::layernorm<T>(ctx.rows, ctx.D, ctx.x.data<T>(), w, data_or_null<T>(b), T(eps), y.data<T>(),
                                      ctx.mean.data<T>(), ctx.rstd.data<T>(), s);
        });
  });
  return y;
}

std::vector<Tensor> layer_norm_backward(LayerNormCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor gy = grad_outputs[0].contiguous();
  NormGrads g = allocate_norm_grads(gy, ctx.x_needs_grad, ctx.weight_needs_grad, ctx.bias_needs_grad, ctx.D);
  if (gy.numel() > 0) {
    dispatch_float("layer_norm", gy, [&](auto tag) {
      using T = decltype(tag);
      const T *x = ctx.x.data<T>(), *w = data_or_null<T>(ctx.weight), *mean = ctx.mean.data<T>(),
              *rstd = ctx.rstd.data<T>();
      T *gx = data_or_null<T>(g.gx), *gw = data_or_null<T>(g.gweight), *gb = data_or_null<T>(g.gbias);
      on_device(
          gy,
          [&] {
            kernels::cpu::layernorm_backward<T>(ctx.rows, ctx.D, x, w, mean, rstd, gy.data<T>(), gx, gw, gb);
          },
          [&](CudaStream s) {
            kernels::cuda::layernorm_backward<T>(ctx.rows, ctx.D, x, w, mean, rstd, gy.data<T>(), gx, gw, gb, s);
          });
    });
  }
  const Shape& ps = ctx.normalized_shape;
  return {g.gx, g.gweight.defined() ? g.gweight.view(ps) : Tensor(), g.gbias.defined() ? g.gbias.view(ps) : Tensor()};
}

// ---- group_norm ---------------------------------------------------------------------------------------------

struct GroupNormCtx {
  Tensor x, weight, mean, rstd;  // x and weight contiguous; mean, rstd (N, G)
  int64_t N = 0, C = 0, S = 0, G = 0;
  bool x_needs_grad = false, weight_needs_grad = false, bias_needs_grad = false;
};

Tensor group_norm_forward(GroupNormCtx& ctx, const Tensor& x, int64_t groups, const Tensor& weight,
                          const Tensor& bias, double eps) {
  check_defined("group_norm", x, "input");
  SHARDRT_CHECK(x.dim() >= 2, ShapeError, "group_norm: input must be (N, C, *spatial), got ", x.str());
  check_norm_params("group_norm", x, weight, bias, {x.size(1)});
  SHARDRT_CHECK(groups >= 1, ValueError, "group_norm: groups must be >= 1, got ", groups, " for ", x.str());
  SHARDRT_CHECK(x.size(1) % groups == 0, ShapeError, "group_norm: ", x.size(1), " channels of ", x.str(),
                " do not split into ", groups, " groups");
  ctx.N = x.size(0);
  ctx.C = x.size(1);
  ctx.S = shape_numel(Shape(x.shape().begin() + 2, x.shape().end()));
  ctx.G = groups;
  ctx.x = x.contiguous().detach();
  if (weight.defined()) ctx.weight = weight.contiguous().detach();
  ctx.mean = Tensor::empty({ctx.N, ctx.G}, x.dtype(), x.device());
  ctx.rstd = Tensor::empty({ctx.N, ctx.G}, x.dtype(), x.device());
  ctx.x_needs_grad = requires_grad(x);
  ctx.weight_needs_grad = weight.defined() && requires_grad(weight);
  ctx.bias_needs_grad = bias.defined() && requires_grad(bias);
  Tensor y = empty_like(x);
  if (x.numel() == 0) return y;
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  dispatch_float("group_norm", x, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = ctx.x.data<T>(), *w = data_or_null<T>(ctx.weight), *bp = data_or_null<T>(b);
    T *yp = y.data<T>(), *mean = ctx.mean.data<T>(), *rstd = ctx.rstd.data<T>();
    on_device(
        x, [&] { kernels::cpu::groupnorm<T>(ctx.N, ctx.C, ctx.S, ctx.G, xp, w, bp, T(eps), yp, mean, rstd); },
        [&](CudaStream s) {
          kernels::cuda::groupnorm<T>(ctx.N, ctx.C, ctx.S, ctx.G, xp, w, bp, T(eps), yp, mean, rstd, s);
        });
  });
  return y;
}

std::vector<Tensor> group_norm_backward(GroupNormCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor gy = grad_outputs[0].contiguous();
  NormGrads g = allocate_norm_grads(gy, ctx.x_needs_grad, ctx.weight_needs_grad, ctx.bias_needs_grad, ctx.C);
  if (gy.numel() > 0) {
    dispatch_float("group_norm", gy, [&](auto tag) {
      using T = decltype(tag);
      const T *x = ctx.x.data<T>(), *w = data_or_null<T>(ctx.weight), *mean = ctx.mean.data<T>(),
              *rstd = ctx.rstd.data<T>(), *gyp = gy.data<T>();
      T *gx = data_or_null<T>(g.gx), *gw = data_or_null<T>(g.gweight), *gb = data_or_null<T>(g.gbias);
      on_device(
          gy,
          [&] { kernels::cpu::groupnorm_backward<T>(ctx.N, ctx.C, ctx.S, ctx.G, x, w, mean, rstd, gyp, gx, gw, gb); },
          [&](CudaStream s) {
            kernels::cuda::groupnorm_backward<T>(ctx.N, ctx.C, ctx.S, ctx.G, x, w, mean, rstd, gyp, gx, gw, gb, s);
          });
    });
  }
  return {g.gx, g.gweight, g.gbias};
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  LayerNormCtx ctx;
  Tensor y = layer_norm_forward(ctx, x, normalized_shape, weight, bias, eps);
  return record("layer_norm", {x, weight, bias}, y, std::move(ctx), layer_norm_backward);
}

Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias, double eps) {
  GroupNormCtx ctx;
  Tensor y = group_norm_forward(ctx, x, groups, weight, bias, eps);
  return record("group_norm", {x, weight, bias}, y, std::move(ctx), group_norm_backward);
}

}  // namespace shardrt
