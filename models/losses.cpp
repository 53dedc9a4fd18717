#include "models/losses.h"

#include "autograd/tape.h"
#include "patches/ops.h"
#include "runtime/errors.h"

namespace shardrt::models {

// Per sample: the sum over every point (dims 1..), completed over the domain axes (the local sums are Partial
// there), so the result is (B,) placed like the samples. One all_reduce per domain axis; its adjoint is local.
ShardTensor per_sample_sum(const ShardTensor& x) {
  std::vector<int> point_dims;
  for (int i = 1; i < static_cast<int>(x.global_shape().size()); ++i) point_dims.push_back(i);
  const ShardTensor partial = sum(x, point_dims);
  Placements whole = partial.placements();
  for (Placement& q : whole)
    if (q.is_partial()) q = Placement::Replicate();
  return redistribute(partial, whole);
}

// mean_b s_b over the GLOBAL batch for per-sample values s_b >= 0. The mean over a batch sharded on ddp has to come
// from a loss patch, which owns the batch-axis scaling of the grads (patches/domain_batch.h), so s_b enters
// mse_loss as sqrt(s_b) against 0: mean_b (sqrt s_b)^2 = mean_b s_b. (s_b = 0, a perfect sample, has no grad.)
ShardTensor batch_mean(const ShardTensor& per_sample) {
  ShardTensor zero;
  {
    NoGradGuard no_grad;
    zero = mul_scalar(per_sample, 0.0);
  }
  return mse_loss(sqrt(per_sample), zero);
}

// The relative L2 error of each sample, ||p_b - t_b|| / ||t_b||, averaged over the batch (PhysicsNeMo's LpLoss
// with size_average): a per-sample mean makes the objective the same however the batch is split over ddp and
// micro-batches, which a batch-wide ||P - T|| / ||T|| would not be.
ShardTensor per_sample_relative_l2_loss(const ShardTensor& pred, const ShardTensor& target) {
  const ShardTensor d = sub(pred, target);
  ShardTensor den;
  {
    NoGradGuard no_grad;  // the target is data
    den = per_sample_sum(mul(target, target));
  }
  return batch_mean(sqrt(div(per_sample_sum(mul(d, d)), den)));
}

// The mean Huber loss. Huber(d) = 0.5 m^2 + delta (|d| - m), m = min(|d|, delta): exact, without a branch.
ShardTensor mean_huber_loss(const ShardTensor& pred, const ShardTensor& target, double delta) {
  const ShardTensor d = sub(pred, target);
  const ShardTensor a = abs(d);
  const ShardTensor m = clamp(a, 0.0, delta);
  const ShardTensor h = add(mul_scalar(mul(m, m), 0.5), mul_scalar(sub(a, m), delta));
  double points = 1;
  for (size_t i = 1; i < h.global_shape().size(); ++i) points *= static_cast<double>(h.global_shape()[i]);
  return batch_mean(mul_scalar(per_sample_sum(h), 1.0 / points));
}

}  // namespace shardrt::models
