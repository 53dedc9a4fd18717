// softmax and log_softmax over any dim, through the (outer, n, inner) kernels. Both backwards need only the
// forward output, so that is what the ctx keeps.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cuda/softmax.h"

namespace shardrt {

using namespace ops_detail;

namespace {

struct SoftmaxCtx {
  const char* name = "";
  bool log = false;
  DimView view;
  Tensor y;
};

Tensor softmax_forward(SoftmaxCtx& ctx, const char* name, bool log, const Tensor& x, int dim) {
  check_float(name, x, "input");
  ctx.name = name;
  ctx.log = log;
  ctx.view = dim_view(x.shape(), wrap_dim_of(name, dim, x));
  Tensor xc = x.contiguous();
  Tensor y = empty_like(x);
  const DimView v = ctx.view;
  dispatch_float(name, x, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        x,
        [&] {
          if (log) kernels::cpu::log_softmax<T>(v.outer, v.n, v.inner, xc.data<T>(), y.data<T>());
          else kernels::cpu::softmax<T>(v.outer, v.n, v.inner, xc.data<T>(), y.data<T>());
        },
        [&](CudaStream s) {
          if (log) kernels::cuda::log_softmax<T>(v.outer, v.n, v.inner, xc.data<T>(), y.data<T>(), s);
          else kernels::cuda::softmax<T>(v.outer, v.n, v.inner, xc.data<T>(), y.data<T>(), s);
        });
  });
  ctx.y = y;
  return y;
}

std::vector<Tensor> softmax_backward(SoftmaxCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = empty_like(gy);
  const DimView v = ctx.view;
  const Tensor& y = ctx.y;
  dispatch_float(ctx.name, gy, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        gy,
        [&] {
          if (ctx.log)
            kernels::cpu::log_softmax_backward<T>(v.outer, v.n, v.inner, y.data<T>(), gy.data<T>(), gx.data<T>());
          else kernels::cpu::softmax_backward<T>(v.outer, v.n, v.inner, y.data<T>(), gy.data<T>(), gx.data<T>());
        },
        [&](CudaStream s) {
          if (ctx.log)
            kernels::cuda::log_softmax_backward<T>(v.outer, v.n, v.inner, y.data<T>(), gy.data<T>(), gx.data<T>(), s);
          else kernels::cuda::softmax_backward<T>(v.outer, v.n, v.inner, y.data<T>(), gy.data<T>(), gx.data<T>(), s);
        });
  });
  return {gx};
}

Tensor softmax_op(const char* name, bool log, const Tensor& x, int dim) {
  SoftmaxCtx ctx;
  Tensor y = softmax_forward(ctx, name, log, x, dim);
  return record(name, {x}, y, std::move(ctx), softmax_backward);
}

}  // namespace

Tensor softmax(const Tensor& x, int dim) { return softmax_op("softmax", false, x, dim); }
Tensor log_softmax(const Tensor& x, int dim) { return softmax_op("log_softmax", true, x, dim); }

}  // namespace shardrt
