// Scaled dot-product attention with a differentiable log-sum-exp output, on the blocked CPU kernel or the tiled
// CUDA kernel (kernels/cuda/attention.h), whichever device the inputs live on.
//
// The leading dims of q, k and v (batch, heads, ...) are flattened into one BH dim of independent problems.
// The forward returns out and lse; the backward recomputes the probabilities from q, k and lse block by block,
// so the ctx holds only q, k, v, out and lse (O(N·D), never O(Nq·Nk)).
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"

namespace shardrt {

using namespace ops_detail;

namespace {

struct AttentionCtx {
  int64_t bh = 0, nq = 0, nk = 0, d = 0, dv = 0;
  double scale = 1.0;
  Tensor q, k, v, out, lse;  // contiguous, without autograd history
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
  ctx.q = q.contiguous().detach();
  ctx.k = k.contiguous().detach();
  ctx.v = v.contiguous().detach();

  Shape out_shape = lead, lse_shape = lead;
  out_shape.insert(out_shape.end(), {ctx.nq, ctx.dv});
  lse_shape.push_back(ctx.nq);
  Tensor out = Tensor::empty(out_shape, q.dtype(), q.device());
  Tensor lse = Tensor::empty(lse_shape, q.dtype(), q.device());
  dispatch_float(op, q, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        q,
        [&] {
          kernels::cpu::attention_forward<T>(ctx.bh, ctx.nq, ctx.nk, ctx.d, ctx.dv, T(scale), ctx.q.data<T>(),
                                             ctx.k.data<T>(), ctx.v.data<T>(), out.data<T>(), lse.data<T>());
        },
        [&](CudaStream stream) {
          kernels::cuda::attention_forward<T>(ctx.bh, ctx.nq, ctx.nk, ctx.d, ctx.dv, T(scale), ctx.q.data<T>(),
                                              ctx.k.data<T>(), ctx.v.data<T>(), out.data<T>(), lse.data<T>(),
                                              stream);
        });
  });
  ctx.out = out;
  ctx.lse = lse;
  return {out, lse};
}

// grad_outputs = {dL/dout, dL/dlse}; the engine passes zeros for an output the loss does not use.
std::vector<Tensor> attention_backward(AttentionCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor grad_out = grad_outputs[0].contiguous();
  Tensor grad_lse = grad_outputs[1].contiguous();
  Tensor gq = empty_like(ctx.q), gk = empty_like(ctx.k), gv = empty_like(ctx.v);
  dispatch_float("scaled_dot_product_attention", grad_out, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        grad_out,
        [&] {
          kernels::cpu::attention_backward<T>(ctx.bh, ctx.nq, ctx.nk, ctx.d, ctx.dv, T(ctx.scale), ctx.q.data<T>(),
                                              ctx.k.data<T>(), ctx.v.data<T>(), ctx.out.data<T>(),
                                              ctx.lse.data<T>(), grad_out.data<T>(), grad_lse.data<T>(),
                                              gq.data<T>(), gk.data<T>(), gv.data<T>());
        },
        [&](CudaStream stream) {
          kernels::cuda::attention_backward<T>(ctx.bh, ctx.nq, ctx.nk, ctx.d, ctx.dv, T(ctx.scale), ctx.q.data<T>(),
                                               ctx.k.data<T>(), ctx.v.data<T>(), ctx.out.data<T>(),
                                               ctx.lse.data<T>(), grad_out.data<T>(), grad_lse.data<T>(),
                                               gq.data<T>(), gk.data<T>(), gv.data<T>(), stream);
        });
  });
  return {gq, gk, gv};
}

}  // namespace

AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  AttentionCtx ctx;
  std::vector<Tensor> outs = attention_forward(ctx, q, k, v, scale);
  outs = record("scaled_dot_product_attention", {q, k, v}, std::move(outs), std::move(ctx), attention_backward);
  return {outs[0], outs[1]};
}

}  // namespace shardrt
