// The relative L2 loss's saved state and closed-form backward, shared by the local op (autograd/ops/loss.cpp)
// and the sharded patch (patches/loss.cpp): the backward is the same once the norms are global.
#pragma once
#include <vector>

#include "runtime/tensor.h"

namespace shardrt::ops_detail {

struct RelativeL2Ctx {
  Tensor diff, target;            // p - t, and t (when its grad is needed); local to this rank
  Tensor diff_norm, target_norm;  // 0-d, over the whole (global) tensors
  Tensor loss;                    // 0-d
  bool pred_needs_grad = false, target_needs_grad = false;
};

// With d = ||p - t|| and r = ||t||:  dL/dp = (p - t) / (d r),  dL/dt = -dL/dp - (L / r^2) t.
std::vector<Tensor> relative_l2_backward(RelativeL2Ctx& ctx, const std::vector<Tensor>& grad_outputs);

}  // namespace shardrt::ops_detail
