#include "autograd/ops/window_args.h"

#include "autograd/ops/common.h"
#include "kernels/cpu/conv.h"
#include "runtime/errors.h"

namespace shardrt::ops_detail {

namespace {

void check_operands(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_float(op, x, "input");
  check_float(op, w, "weight");
  if (bias.defined()) check_float(op, bias, "bias");
  check_compatible(op, {&x, &w, &bias});
}

// The kernel extents of w (*, *, *kernel), each at least 1.
std::vector<int64_t> kernel_extents(const char* op, const Tensor& w, int nd) {
  std::vector<int64_t> kernel(nd);
  for (int d = 0; d < nd; ++d) {
    kernel[d] = w.size(2 + d);
    SHARDRT_CHECK(kernel[d] >= 1, ShapeError, op, ": weight ", w.str(), " has an empty kernel");
  }
  return kernel;
}

}  // namespace

WindowArgs check_conv_args(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride,
                           const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation) {
  const char* op = "conv";
  check_operands(op, x, w, bias);
  const int nd = spatial_dims(op, x);
  SHARDRT_CHECK(w.dim() == x.dim(), ShapeError, op, ": weight ", w.str(), " must be (Cout, Cin, *kernel) for input ",
                x.str());
  SHARDRT_CHECK(w.size(1) == x.size(1), ShapeError, op, ": input ", x.str(), " has ", x.size(1),
                " channels but weight ", w.str(), " expects ", w.size(1));
  SHARDRT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0)), ShapeError, op, ": bias ",
                bias.str(), " must be (Cout) for weight ", w.str());
  WindowArgs a;
  a.kernel = kernel_extents(op, w, nd);
  a.stride = per_spatial_dim(op, "stride", stride, nd, 1);
  a.padding = per_spatial_dim(op, "padding", padding, nd, 0);
  a.dilation = per_spatial_dim(op, "dilation", dilation, nd, 1);
  // An empty input dim gives an empty output dim (a zero-size shard); otherwise the kernel must fit.
  for (int d = 0; d < nd; ++d) {
    const int64_t in = x.size(2 + d);
    SHARDRT_CHECK(
        in == 0 || kernels::cpu::conv_output_size(in, a.kernel[d], a.stride[d], a.padding[d], a.dilation[d]) >= 1,
        ShapeError, op, ": kernel ", shape_str(a.kernel), " with dilation ", shape_str(a.dilation),
        " does not fit input ", x.str(), " padded by ", shape_str(a.padding), " in spatial dim ", d);
  }
  return a;
}

std::vector<int64_t> check_conv_transpose_args(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const char* op = "conv_transpose";
  check_operands(op, x, w, bias);
  const int nd = spatial_dims(op, x);
  SHARDRT_CHECK(w.dim() == x.dim(), ShapeError, op, ": weight ", w.str(), " must be (Cin, Cout, *kernel) for input ",
                x.str());
  SHARDRT_CHECK(w.size(0) == x.size(1), ShapeError, op, ": input ", x.str(), " has ", x.size(1),
                " channels but weight ", w.str(), " expects ", w.size(0));
  SHARDRT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(1)), ShapeError, op, ": bias ",
                bias.str(), " must be (Cout) for weight ", w.str());
  return kernel_extents(op, w, nd);
}

WindowArgs check_pool_args(const char* op, const Tensor& x, const std::vector<int64_t>& kernel,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& padding) {
  check_float(op, x, "input");
  const int nd = spatial_dims(op, x);
  WindowArgs a;
  a.kernel = per_spatial_dim(op, "kernel", kernel, nd, 1);
  a.stride = stride.empty() ? a.kernel : per_spatial_dim(op, "stride", stride, nd, 1);
  a.padding = per_spatial_dim(op, "padding", padding, nd, 0);
  a.dilation.assign(nd, 1);
  for (int d = 0; d < nd; ++d)
    SHARDRT_CHECK(2 * a.padding[d] <= a.kernel[d], ValueError, op, ": padding ", shape_str(a.padding),
                  " must be at most half the kernel ", shape_str(a.kernel), " (input ", x.str(), ")");
  for (int d = 0; d < nd; ++d)
    SHARDRT_CHECK(kernels::cpu::conv_output_size(x.size(2 + d), a.kernel[d], a.stride[d], a.padding[d], 1) >= 1,
                  ShapeError, op, ": kernel ", shape_str(a.kernel), " does not fit input ", x.str(), " padded by ",
                  shape_str(a.padding), " in spatial dim ", d);
  return a;
}

std::vector<int64_t> check_upsample_args(const char* op, const Tensor& x, const std::vector<int64_t>& out_size) {
  check_float(op, x, "input");
  const int nd = spatial_dims(op, x);
  const std::vector<int64_t> out = per_spatial_dim(op, "output size", out_size, nd, 0);
  for (int d = 0; d < nd; ++d) {
    const int64_t in = x.size(2 + d);
    // An empty dim maps to an empty dim (a zero-size shard of a sharded input); otherwise both are non-empty.
    SHARDRT_CHECK(in >= 1 || out[d] == 0, ShapeError, op, ": spatial dim ", d, " of ", x.str(),
                  " is empty and cannot be resized to ", out[d], " (an empty dim maps only to an empty dim)");
    SHARDRT_CHECK(in == 0 || out[d] >= 1, ValueError, op, ": output size ", shape_str(out),
                  " has a 0 for the non-empty spatial dim ", d, " of ", x.str());
  }
  return out;
}

void check_pad_args(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode) {
  check_float("pad", x, "input");
  SHARDRT_CHECK(pads.size() == 2 || pads.size() == 4 || pads.size() == 6, ValueError, "pad: expected 2, 4 or 6 pad "
                "values ((before, after) pairs for 1-3 trailing dims), got ", shape_str(pads), " for ", x.str());
  const int nd = static_cast<int>(pads.size() / 2);
  SHARDRT_CHECK(nd <= x.dim(), ShapeError, "pad: ", shape_str(pads), " pads ", nd, " dims but the input ", x.str(),
                " has only ", x.dim());
  const int lead = x.dim() - nd;
  for (int d = 0; d < nd; ++d) {
    // pads lists the last dim first.
    const int64_t in = x.size(lead + d), lo = pads[2 * (nd - 1 - d)], hi = pads[2 * (nd - 1 - d) + 1];
    SHARDRT_CHECK(in + lo + hi >= 0, ShapeError, "pad: pads (", lo, ", ", hi, ") on dim ", lead + d,
                  " crop more than ", x.str(), " has");
    SHARDRT_CHECK(mode == PadMode::constant || in > 0 || in + lo + hi == 0, ShapeError, "pad: ", pad_mode_name(mode),
                  " padding of dim ", lead + d, " needs a non-empty dim, got ", x.str());
    SHARDRT_CHECK(mode != PadMode::reflect || (lo < in && hi < in), ShapeError, "pad: reflect pads (", lo, ", ", hi,
                  ") on dim ", lead + d, " must be smaller than its size in ", x.str());
  }
}

const char* pad_mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::constant: return "constant";
    case PadMode::reflect: return "reflect";
    case PadMode::replicate: return "replicate";
    case PadMode::circular: return "circular";
  }
  return "unknown";
}

}  // namespace shardrt::ops_detail
