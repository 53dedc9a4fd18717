// Resampling of the 1-3 spatial dims of (B, C, *spatial) to a given size: nearest, and linear / bilinear /
// trilinear with PyTorch's align_corners conventions. Both are linear in x with fixed weights, so the backward
// needs only the geometry: it spreads each output grad over the inputs it was interpolated from.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "autograd/ops/window_args.h"
#include "kernels/cpu/upsample.h"
#include "kernels/cuda/upsample.h"

namespace shardrt {

using namespace ops_detail;

namespace {

using kernels::cpu::UpsampleMode;

struct UpsampleCtx {
  const char* name = "";
  UpsampleMode mode = UpsampleMode::nearest;
  bool align_corners = false;
  int nd = 0;
  int64_t planes = 0;  // B·C
  std::vector<int64_t> in, out;
  Shape in_shape;
};

Tensor upsample_forward(UpsampleCtx& ctx, const char* op, UpsampleMode mode, bool align_corners, const Tensor& x,
                        const std::vector<int64_t>& out_size) {
  ctx.out = check_upsample_args(op, x, out_size);
  const int nd = static_cast<int>(ctx.out.size());
  for (int d = 0; d < nd; ++d) ctx.in.push_back(x.size(2 + d));
  ctx.name = op;
  ctx.mode = mode;
  ctx.align_corners = align_corners;
  ctx.nd = nd;
  ctx.planes = x.size(0) * x.size(1);
  ctx.in_shape = x.shape();

  Shape out_shape{x.size(0), x.size(1)};
  out_shape.insert(out_shape.end(), ctx.out.begin(), ctx.out.end());
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  dispatch_float(op, x, [&](auto tag) {
    using T = decltype(tag);
    const int64_t *in = ctx.in.data(), *out = ctx.out.data();
    const T* xp = xc.data<T>();
    T* yp = y.data<T>();
    on_device(
        x, [&] { kernels::cpu::upsample_forward<T>(mode, align_corners, nd, ctx.planes, in, out, xp, yp); },
        [&](CudaStream s) {
          kernels::cuda::upsample_forward<T>(mode, align_corners, nd, ctx.planes, in, out, xp, yp, s);
        });
  });
  return y;
}

std::vector<Tensor> upsample_backward(UpsampleCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = Tensor::empty(ctx.in_shape, gy.dtype(), gy.device());
  if (gx.numel() == 0 || gy.numel() == 0) {
    gx.zero_();
    return {gx};
  }
  dispatch_float(ctx.name, gy, [&](auto tag) {
    using T = decltype(tag);
    const int64_t *in = ctx.in.data(), *out = ctx.out.data();
    on_device(
        gy,
        [&] {
          kernels::cpu::upsample_backward<T>(ctx.mode, ctx.align_corners, ctx.nd, ctx.planes, in, out, gy.data<T>(),
                                             gx.data<T>());
        },
        [&](CudaStream s) {
          kernels::cuda::upsample_backward<T>(ctx.mode, ctx.align_corners, ctx.nd, ctx.planes, in, out, gy.data<T>(),
                                              gx.data<T>(), s);
        });
  });
  return {gx};
}

Tensor upsample_op(const char* op, UpsampleMode mode, bool align_corners, const Tensor& x,
                   const std::vector<int64_t>& out_size) {
  UpsampleCtx ctx;
  Tensor y = upsample_forward(ctx, op, mode, align_corners, x, out_size);
  return record(op, {x}, y, std::move(ctx), upsample_backward);
}

}  // namespace

Tensor upsample_nearest(const Tensor& x, const std::vector<int64_t>& out_size) {
  return upsample_op("upsample_nearest", UpsampleMode::nearest, false, x, out_size);
}

Tensor upsample_linear(const Tensor& x, const std::vector<int64_t>& out_size, bool align_corners) {
  return upsample_op("upsample_linear", UpsampleMode::linear, align_corners, x, out_size);
}

}  // namespace shardrt
