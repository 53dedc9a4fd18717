// The argument checks of the sliding-window and resampling ops (conv, conv_transpose, avg/max pooling,
// upsampling, pad), on shapes alone. The local ops (autograd/ops/{conv,pool,upsample,shape}.cpp) run them on their
// input; the sharded ops (patches/) run them on a stand-in for the GLOBAL tensor (shape_stand_in) before any plan
// or collective. So a bad argument is one error, with one message, for the local op and on every rank of the
// sharded one — and the rules exist once.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/ops.h"
#include "runtime/tensor.h"

namespace shardrt::ops_detail {

// A window op's arguments, one entry per spatial dim.
struct WindowArgs {
  std::vector<int64_t> kernel, stride, padding, dilation;
};

// conv: x (B, Cin, *spatial) and w (Cout, Cin, *kernel) floating and compatible, bias (Cout) or undefined; stride,
// padding, dilation with one entry per spatial dim or one for all (>= 1, >= 0, >= 1); the dilated kernel fits the
// padded input in every non-empty spatial dim (an empty dim gives an empty output dim).
WindowArgs check_conv_args(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride,
                           const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation);
// conv_transpose with kernel == stride: w (Cin, Cout, *kernel), bias (Cout) or undefined. Returns the kernel.
std::vector<int64_t> check_conv_transpose_args(const Tensor& x, const Tensor& w, const Tensor& bias);
// avg_pool / max_pool (`op` names which): kernel >= 1, stride >= 1 (empty: the kernel), padding at most half the
// kernel, and the window fits the padded input. Dilation is 1.
WindowArgs check_pool_args(const char* op, const Tensor& x, const std::vector<int64_t>& kernel,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& padding);
// upsample_nearest / upsample_linear (`op`): the output size per spatial dim (one entry for all expanded); an
// empty dim maps only to an empty dim, a non-empty one to a non-empty one.
std::vector<int64_t> check_upsample_args(const char* op, const Tensor& x, const std::vector<int64_t>& out_size);
// pad: 2, 4 or 6 values ((before, after) pairs, last dim first) for at most x.dim() trailing dims; no dim cropped
// below 0; reflect/replicate/circular need a non-empty dim, reflect pads smaller than the dim.
void check_pad_args(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode);

const char* pad_mode_name(PadMode mode);

}  // namespace shardrt::ops_detail
