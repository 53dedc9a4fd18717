// Scaled dot-product attention with a differentiable log-sum-exp output, on the blocked CPU kernel or the tiled
// CUDA kernel (kernels/cuda/attention.h), whichever device the inputs live on.
//
// The leading dims of q, k and v (batch, heads, ...) are flattened into one BH dim of independent problems.
// The forward returns out and lse; the backward recomputes the probabilities from q, k and lse block by block,
// so the ctx holds only q, k, v, out and lse (O(N·D), never O(Nq·Nk)).
//
// Autocast (autograd/autocast.h), for f32 q, k, v inside a bf16/f16 scope:
//   forward   out, lse = attention(round(q), round(k), round(v)): scores, softmax and sums in f32; out and lse f32;
//   backward  dq, dk, dv from round(q), round(k), round(v) as saved, round(dout) and the f32 dlse; grads f32.
// CPU: the f32 kernel over f32-held rounded values (so P stays f32 before it meets V). CUDA: the 16-bit kernel
// (kernels/cuda/attention.h, f32 accumulation and an f32 lse), whose 16-bit out and grads are widened to f32 —
// on CUDA out and the grads pass through 16-bit storage, which the backend parity rows' tolerance covers.
#include <optional>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/attention_block.h"
#include "autograd/ops/common.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"

namespace shardrt {

using namespace ops_detail;

namespace {

struct AttentionCtx {
  int64_t bh = 0, nq = 0, nk = 0, d = 0, dv = 0;
  double scale = 1.0;
  Tensor q, k, v, out, lse;  // contiguous, without autograd history; q, k, v (and out on CUDA) rounded under autocast
  std::optional<DType> compute;  // autocast's bf16/f16, chosen in the forward
};

// Leading dims of t (all but the last two).
Shape leading_dims(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

void check_attention_shapes(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  SHARDRT_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError, op,
                ": q, k, v must have one rank >= 2, got q ", q.str(), ", k ", k.str(), ", v ", v.str());
  SHARDRT_CHECK(leading_dims(k) == leading_dims(q) && leading_dims(v) == leading_dims(q), ShapeError, op,
                ": q, k, v must have equal leading dims, got q ", q.str(), ", k ", k.str(), ", v ", v.str());
  SHARDRT_CHECK(q.size(-1) == k.size(-1), ShapeError, op, ": q and k must share the feature dim D, got q ", q.str(),
                ", k ", k.str());
  SHARDRT_CHECK(k.size(-2) == v.size(-2), ShapeError, op, ": k and v must share the key count Nk, got k ", k.str(),
                ", v ", v.str());
}

std::vector<Tensor> attention_forward(AttentionCtx& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                      double scale) {
  const char* op = "scaled_dot_product_attention";
  check_float(op, q, "q");
  check_float(op, k, "k");
  check_float(op, v, "v");
  check_compatible(op, {&q, &k, &v});
  check_attention_shapes(op, q, k, v);

  const Shape lead = leading_dims(q);
  ctx.bh = shape_numel(lead);
  ctx.nq = q.size(-2);
  ctx.nk = k.size(-2);
  ctx.d = q.size(-1);
  ctx.dv = v.size(-1);
  ctx.scale = scale;
  ctx.compute = autocast_compute({&q, &k, &v});
  const auto operand = [&](const Tensor& t) {
    return ctx.compute ? round_operand(t, *ctx.compute, kernel_operand_form(t)) : t.contiguous().detach();
  };
  ctx.q = operand(q);
  ctx.k = operand(k);
  ctx.v = operand(v);

  Shape out_shape = lead, lse_shape = lead;
  out_shape.insert(out_shape.end(), {ctx.nq, ctx.dv});
  lse_shape.push_back(ctx.nq);
  // The kernel writes out in its operand dtype (16-bit for autocast on CUDA) and lse in f32 / f64.
  Tensor out = Tensor::empty(out_shape, ctx.q.dtype(), q.device());
  Tensor lse = Tensor::empty(lse_shape, q.dtype(), q.device());
  dispatch_attention("scaled_dot_product_attention", ctx.q, [&](auto tag) {
    using T = decltype(tag);
    using A = kernels::cuda::AccumT<T>;  // == T for the CPU's float and double
    const T *qp = attention_data<T>(ctx.q), *kp = attention_data<T>(ctx.k), *vp = attention_data<T>(ctx.v);
    T* op = attention_data<T>(out);
    A* lp = attention_data<A>(lse);
    on_device(
        q,
        [&] {
          if constexpr (kCpuAttention<T>)
            kernels::cpu::attention_forward<T>(ctx.bh, ctx.nq, ctx.nk, ctx.d, ctx.dv, T(scale), qp, kp, vp, op, lp);
        },
        [&](CudaStream stream) {
          kernels::cuda::attention_forward<T>(ctx.bh, ctx.nq, ctx.nk, ctx.d, ctx.dv, A(scale), qp, kp, vp, op, lp,
                                              stream);
        });
  });
  ctx.out = out;
  ctx.lse = lse;
  return {out.to(q.dtype()), lse};
}

// grad_outputs = {dL/dout, dL/dlse}; the engine passes zeros for an output the loss does not use.
std::vector<Tensor> attention_backward(AttentionCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const DType grad_dtype = ctx.lse.dtype();  // the inputs' dtype (lse is never 16-bit)
  Tensor grad_out = grad_outputs[0].contiguous();
  if (ctx.compute) grad_out = round_operand(grad_out, *ctx.compute, kernel_operand_form(grad_out));
  Tensor grad_lse = grad_outputs[1].contiguous();
  Tensor gq = empty_like(ctx.q), gk = empty_like(ctx.k), gv = empty_like(ctx.v);
  dispatch_attention("scaled_dot_product_attention", ctx.q, [&](auto tag) {
    using T = decltype(tag);
    using A = kernels::cuda::AccumT<T>;  // == T for the CPU's float and double
    const T *qp = attention_data<T>(ctx.q), *kp = attention_data<T>(ctx.k), *vp = attention_data<T>(ctx.v);
    const T *op = attention_data<T>(ctx.out), *gop = attention_data<T>(grad_out);
    const A *lp = attention_data<A>(ctx.lse), *glp = attention_data<A>(grad_lse);
    T *gqp = attention_data<T>(gq), *gkp = attention_data<T>(gk), *gvp = attention_data<T>(gv);
    on_device(
        grad_out,
        [&] {
          if constexpr (kCpuAttention<T>)
            kernels::cpu::attention_backward<T>(ctx.bh, ctx.nq, ctx.nk, ctx.d, ctx.dv, T(ctx.scale), qp, kp, vp, op,
                                                lp, gop, glp, gqp, gkp, gvp);
        },
        [&](CudaStream stream) {
          kernels::cuda::attention_backward<T>(ctx.bh, ctx.nq, ctx.nk, ctx.d, ctx.dv, A(ctx.scale), qp, kp, vp, op,
                                               lp, gop, glp, gqp, gkp, gvp, stream);
        });
  });
  return {gq.to(grad_dtype), gk.to(grad_dtype), gv.to(grad_dtype)};
}

}  // namespace

AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  AttentionCtx ctx;
  std::vector<Tensor> outs = attention_forward(ctx, q, k, v, scale);
  outs = record("scaled_dot_product_attention", {q, k, v}, std::move(outs), std::move(ctx), attention_backward);
  return {outs[0], outs[1]};
}

}  // namespace shardrt
