// shardrt-train's losses on a model's output and its target, as ShardTensors on any mesh: the relative L2 error
// per sample (PhysicsNeMo's LpLoss), the mean squared error and the mean Huber loss, each the same objective
// however the batch and the points are split.
#pragma once
#include <string>

#include "data/normalizer.h"
#include "patches/shard_tensor.h"
#include "tools/train_config.h"

namespace shardrt::tools {

// The loss `c.loss` (a Replicate scalar on every rank). `target_stats`, when given, is the normaliser of the target
// field: with loss.units "physical" both fields are first taken back to physical units (x * std + mean).
ShardTensor training_loss(const TrainConfig& c, const ShardTensor& pred, const ShardTensor& target,
                          const data::FieldStats* target_stats = nullptr);

// What the training loss is, for the loss plot's key and the run's first line: its quantity and units, e.g.
// "training loss: relative L2 of the pressure (physical units)". `normalized_data`: the fields are normalised.
std::string training_loss_label(const TrainConfig& c, bool normalized_data);

}  // namespace shardrt::tools
