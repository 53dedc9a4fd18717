#include "tools/train_loss.h"

#include "models/losses.h"
#include "patches/ops.h"
#include "runtime/errors.h"

namespace shardrt::tools {

ShardTensor training_loss(const TrainConfig& c, const ShardTensor& pred, const ShardTensor& target) {
  switch (c.loss) {
    case LossKind::relative_l2: return models::per_sample_relative_l2_loss(pred, target);
    case LossKind::mse: return mse_loss(pred, target);
    case LossKind::huber: return models::mean_huber_loss(pred, target, c.huber_delta);
  }
  throw ValueError("shardrt-train: unknown loss");
}

}  // namespace shardrt::tools
