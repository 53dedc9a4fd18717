// Average and max pooling over 1-3 spatial dims with PyTorch's semantics (ceil_mode = false, padding counted
// in the average, padding at most half the kernel). max_pool keeps the forward's argmax so that the backward
// routes each grad to its window's winner without looking at x again.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "autograd/ops/window_args.h"
#include "kernels/cpu/pool.h"
#include "kernels/cuda/pool.h"

namespace shardrt {

using namespace ops_detail;

namespace {

using kernels::cpu::ConvGeometry;

// The pooling window over x (B, C, *spatial) as a ConvGeometry; an empty stride means stride = kernel.
ConvGeometry plan_pool(const char* op, const Tensor& x, const std::vector<int64_t>& kernel_in,
                       const std::vector<int64_t>& stride_in, const std::vector<int64_t>& padding_in) {
  const WindowArgs a = check_pool_args(op, x, kernel_in, stride_in, padding_in);
  const int nd = static_cast<int>(a.kernel.size());
  std::vector<int64_t> in(nd);
  for (int d = 0; d < nd; ++d) in[d] = x.size(2 + d);
  const ConvGeometry g = kernels::cpu::make_conv_geometry(nd, x.size(0), x.size(1), x.size(1), in.data(),
                                                          a.kernel.data(), a.stride.data(), a.padding.data(),
                                                          a.dilation.data());
  return g;
}

Shape pooled_shape(const ConvGeometry& g) {
  Shape shape{g.batch, g.c_in};
  for (int d = 0; d < g.nd; ++d) shape.push_back(g.out[d]);
  return shape;
}

// ---- avg_pool -------------------------------------------------------------------------------------------------------

struct AvgPoolCtx {
  ConvGeometry geometry{};
  Shape in_shape;
};

Tensor avg_pool_forward(AvgPoolCtx& ctx, const Tensor& x, const std::vector<int64_t>& kernel,
                        const std::vector<int64_t>& stride, const std::vector<int64_t>& padding) {
  ctx.geometry = plan_pool("avg_pool", x, kernel, stride, padding);
  ctx.in_shape = x.shape();
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(pooled_shape(ctx.geometry), x.dtype(), x.device());
  dispatch_float("avg_pool", x, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        x, [&] { kernels::cpu::avg_pool_forward<T>(ctx.geometry, xc.data<T>(), y.data<T>()); },
        [&](CudaStream s) { kernels::cuda::avg_pool_forward<T>(ctx.geometry, xc.data<T>(), y.data<T>(), s); });
  });
  return y;
}

// Every window spreads its grad evenly over its kernel volume; the shares of padded taps are dropped.
std::vector<Tensor> avg_pool_backward(AvgPoolCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = Tensor::empty(ctx.in_shape, gy.dtype(), gy.device());
  dispatch_float("avg_pool", gy, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        gy, [&] { kernels::cpu::avg_pool_backward<T>(ctx.geometry, gy.data<T>(), gx.data<T>()); },
        [&](CudaStream s) { kernels::cuda::avg_pool_backward<T>(ctx.geometry, gy.data<T>(), gx.data<T>(), s); });
  });
  return {gx};
}

// ---- max_pool -------------------------------------------------------------------------------------------------------

struct MaxPoolCtx {
  ConvGeometry geometry{};
  Shape in_shape;
  Tensor argmax;  // i64 (B, C, *out): each window's winner within its input plane
};

Tensor max_pool_forward(MaxPoolCtx& ctx, const Tensor& x, const std::vector<int64_t>& kernel,
                        const std::vector<int64_t>& stride, const std::vector<int64_t>& padding) {
  ctx.geometry = plan_pool("max_pool", x, kernel, stride, padding);
  ctx.in_shape = x.shape();
  const Shape out_shape = pooled_shape(ctx.geometry);
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  ctx.argmax = Tensor::empty(out_shape, DType::i64, x.device());
  dispatch_float("max_pool", x, [&](auto tag) {
    using T = decltype(tag);
    int64_t* argmax = ctx.argmax.data<int64_t>();
    on_device(
        x, [&] { kernels::cpu::max_pool_forward<T>(ctx.geometry, xc.data<T>(), y.data<T>(), argmax); },
        [&](CudaStream s) {
          kernels::cuda::max_pool_forward<T>(ctx.geometry, xc.data<T>(), y.data<T>(), argmax, s);
        });
  });
  return y;
}

// Each window's grad goes to its winner.
std::vector<Tensor> max_pool_backward(MaxPoolCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = Tensor::empty(ctx.in_shape, gy.dtype(), gy.device());
  dispatch_float("max_pool", gy, [&](auto tag) {
    using T = decltype(tag);
    const int64_t* argmax = ctx.argmax.data<int64_t>();
    on_device(
        gy, [&] { kernels::cpu::max_pool_backward<T>(ctx.geometry, gy.data<T>(), argmax, gx.data<T>()); },
        [&](CudaStream s) {
          kernels::cuda::max_pool_backward<T>(ctx.geometry, gy.data<T>(), argmax, gx.data<T>(), s);
        });
  });
  return {gx};
}

}  // namespace

Tensor avg_pool(const Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                const std::vector<int64_t>& padding) {
  AvgPoolCtx ctx;
  Tensor y = avg_pool_forward(ctx, x, kernel, stride, padding);
  return record("avg_pool", {x}, y, std::move(ctx), avg_pool_backward);
}

Tensor max_pool(const Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                const std::vector<int64_t>& padding) {
  MaxPoolCtx ctx;
  Tensor y = max_pool_forward(ctx, x, kernel, stride, padding);
  return record("max_pool", {x}, y, std::move(ctx), max_pool_backward);
}

}  // namespace shardrt
