#include "tools/train_loss.h"

#include "models/losses.h"
#include "patches/ops.h"
#include "runtime/errors.h"

namespace shardrt::tools {

namespace {

ShardTensor loss_of(const TrainConfig& c, const ShardTensor& pred, const ShardTensor& target) {
  switch (c.loss) {
    case LossKind::relative_l2: return models::per_sample_relative_l2_loss(pred, target);
    case LossKind::mse: return mse_loss(pred, target);
    case LossKind::huber: return models::mean_huber_loss(pred, target, c.huber_delta);
  }
  throw ValueError("shardrt-train: unknown loss");
}

}  // namespace

ShardTensor training_loss(const TrainConfig& c, const ShardTensor& pred, const ShardTensor& target,
                          const data::FieldStats* target_stats) {
  if (!c.loss_physical_units || !target_stats) return loss_of(c, pred, target);
  const data::FieldStats& s = *target_stats;
  // The relative L2 is scale-free, so x * std + mean can be x + mean / std there: one op per field, not two.
  if (c.loss == LossKind::relative_l2)
    return loss_of(c, add_scalar(pred, s.mean / s.std), add_scalar(target, s.mean / s.std));
  return loss_of(c, add_scalar(mul_scalar(pred, s.std), s.mean), add_scalar(mul_scalar(target, s.std), s.mean));
}

std::string training_loss_label(const TrainConfig& c, bool normalized_data) {
  const bool physical = !normalized_data || c.loss_physical_units;
  switch (c.loss) {
    case LossKind::relative_l2:
      return physical ? "training loss: relative L2 of the pressure (physical units)"
                      : "training loss: relative L2 of the normalised pressure";
    case LossKind::mse:
      return std::string("training loss: mean squared error of the pressure (") +
             (physical ? "physical units squared)" : "normalised units)");
    case LossKind::huber:
      return std::string("training loss: Huber loss of the pressure (") +
             (physical ? "physical units)" : "normalised units)");
  }
  return "training loss";
}

}  // namespace shardrt::tools
