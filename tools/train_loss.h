// shardrt-train's losses on a model's output and its target, as ShardTensors on any mesh: the relative L2 error
// per sample (PhysicsNeMo's LpLoss), the mean squared error and the mean Huber loss, each the same objective
// however the batch and the points are split.
#pragma once
#include "patches/shard_tensor.h"
#include "tools/train_config.h"

namespace shardrt::tools {

// The loss `c.loss` (a Replicate scalar on every rank).
ShardTensor training_loss(const TrainConfig& c, const ShardTensor& pred, const ShardTensor& target);

}  // namespace shardrt::tools
