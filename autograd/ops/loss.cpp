// Losses, each one recorded op with its own backward. The forwards evaluate their pieces with other ops under a
// NoGradGuard (so nothing inside is recorded) and keep what the closed-form backward needs.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "autograd/ops/relative_l2.h"
#include "runtime/factories.h"

namespace shardrt {

using namespace ops_detail;

std::vector<Tensor> ops_detail::relative_l2_backward(RelativeL2Ctx& ctx, const std::vector<Tensor>& grad_outputs) {
  // With d = ||p - t|| and r = ||t||:
  //   dL/dp = (p - t) / (d r)
  //   dL/dt = -(p - t) / (d r) - (d / r^3) t = -dL/dp - (L / r^2) t
  // At p == t (d == 0) the norm has no derivative; the grad through it is taken as 0, as for torch.norm (a NaN d
  // still propagates).
  const Tensor& g = grad_outputs[0];
  const Tensor zero = scalar_like(g, 0.0);
  const Tensor diff_scale = where(ne(ctx.diff_norm, zero), div(g, mul(ctx.diff_norm, ctx.target_norm)), zero);
  const Tensor gp = mul(ctx.diff, diff_scale);
  std::vector<Tensor> grads(2);
  if (ctx.pred_needs_grad) grads[0] = gp;
  if (ctx.target_needs_grad) {
    const Tensor target_scale = div(mul(g, ctx.loss), mul(ctx.target_norm, ctx.target_norm));
    grads[1] = neg(add(gp, mul(ctx.target, target_scale)));
  }
  return grads;
}


namespace {

void check_pair(const char* name, const Tensor& pred, const Tensor& target) {
  check_float(name, pred, "prediction");
  check_float(name, target, "target");
  check_compatible(name, {&pred, &target});
  SHARDRT_CHECK(pred.shape() == target.shape(), ShapeError, name, ": prediction ", pred.str(), " and target ",
                target.str(), " differ in shape");
}

// ---- mse_loss: L = mean((p - t)^2) ----------------------------------------------------------------------------

struct MseCtx {
  Tensor diff;  // p - t
  bool pred_needs_grad = false, target_needs_grad = false;
};

Tensor mse_forward(MseCtx& ctx, const Tensor& pred, const Tensor& target) {
  check_pair("mse_loss", pred, target);
  ctx.pred_needs_grad = requires_grad(pred);
  ctx.target_needs_grad = requires_grad(target);
  NoGradGuard no_grad;
  ctx.diff = sub(pred, target);
  return mean(mul(ctx.diff, ctx.diff));
}

std::vector<Tensor> mse_backward(MseCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  // dL/dp = 2 (p - t) / n = -dL/dt
  const double n = static_cast<double>(ctx.diff.numel());
  Tensor gp = mul(ctx.diff, mul_scalar(grad_outputs[0], 2.0 / n));
  return {ctx.pred_needs_grad ? gp : Tensor(), ctx.target_needs_grad ? neg(gp) : Tensor()};
}

// ---- relative_l2_loss: L = ||p - t|| / ||t|| ------------------------------------------------------------------


Tensor relative_l2_forward(RelativeL2Ctx& ctx, const Tensor& pred, const Tensor& target) {
  check_pair("relative_l2_loss", pred, target);
  ctx.pred_needs_grad = requires_grad(pred);
  ctx.target_needs_grad = requires_grad(target);
  NoGradGuard no_grad;
  ctx.diff = sub(pred, target);
  ctx.diff_norm = sqrt(sum(mul(ctx.diff, ctx.diff)));
  ctx.target_norm = sqrt(sum(mul(target, target)));
  ctx.loss = div(ctx.diff_norm, ctx.target_norm);
  if (ctx.target_needs_grad) ctx.target = target.detach();
  return ctx.loss;
}


// ---- cross_entropy: L = -(1/N) sum_i log_softmax(logits)[i, target_i] ---------------------------------------

struct CrossEntropyCtx {
  Tensor log_probs;  // (N, C)
  Tensor targets;    // (N) i64
};

// Reads the targets on the host (a copy of N integers when they live on a GPU) so that an out-of-range class is
// reported by value instead of silently indexing out of bounds.
void check_targets(const Tensor& logits, const Tensor& targets) {
  const int64_t C = logits.size(1);
  const Tensor host = targets.to(Device::cpu()).contiguous();
  const int64_t* t = host.data<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i)
    SHARDRT_CHECK(t[i] >= 0 && t[i] < C, ValueError, "cross_entropy: target ", t[i], " at index ", i,
                  " is outside [0, ", C, ") for logits ", logits.str());
}

// (N, C) u8 with 1 where c == target_i: the targets broadcast against the class indices, compared in f64 (exact
// for any class count).
Tensor one_hot_mask(const Tensor& targets, int64_t C) {
  const Tensor classes = arange(0.0, static_cast<double>(C), 1.0, {DType::f64, targets.device()});
  return eq(to_dtype(targets, DType::f64).view({targets.numel(), 1}), classes.view({1, C}));
}

Tensor cross_entropy_forward(CrossEntropyCtx& ctx, const Tensor& logits, const Tensor& targets) {
  check_float("cross_entropy", logits, "logits");
  check_defined("cross_entropy", targets, "targets");
  SHARDRT_CHECK(targets.dtype() == DType::i64, DTypeError, "cross_entropy: targets must be i64, got ", targets.str());
  check_same_device("cross_entropy", logits, targets);
  SHARDRT_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0), ShapeError,
                "cross_entropy: expected logits (N, C) and targets (N), got ", logits.str(), " and ", targets.str());
  check_targets(logits, targets);
  NoGradGuard no_grad;
  ctx.log_probs = log_softmax(logits, 1);
  ctx.targets = targets.detach();
  const Tensor picked = where(one_hot_mask(targets, logits.size(1)), ctx.log_probs, scalar_like(logits, 0.0));
  return mul_scalar(sum(picked), -1.0 / static_cast<double>(logits.size(0)));
}

std::vector<Tensor> cross_entropy_backward(CrossEntropyCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  // dL/dlogits = (softmax(logits) - one_hot) / N
  const Tensor& g = grad_outputs[0];
  const int64_t N = ctx.log_probs.size(0), C = ctx.log_probs.size(1);
  const Tensor one_hot = to_dtype(one_hot_mask(ctx.targets, C), g.dtype());
  return {mul(sub(exp(ctx.log_probs), one_hot), mul_scalar(g, 1.0 / static_cast<double>(N)))};
}

}  // namespace

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  MseCtx ctx;
  Tensor loss = mse_forward(ctx, pred, target);
  return record("mse_loss", {pred, target}, loss, std::move(ctx), mse_backward);
}

Tensor relative_l2_loss(const Tensor& pred, const Tensor& target) {
  RelativeL2Ctx ctx;
  Tensor loss = relative_l2_forward(ctx, pred, target);
  return record("relative_l2_loss", {pred, target}, loss, std::move(ctx), relative_l2_backward);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  CrossEntropyCtx ctx;
  Tensor loss = cross_entropy_forward(ctx, logits, targets);
  return record("cross_entropy", {logits}, loss, std::move(ctx), cross_entropy_backward);
}

}  // namespace shardrt
