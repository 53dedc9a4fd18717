// The training losses of the bundled models' recipes, on ShardTensors on any mesh, each the same objective however
// the batch and the points are split: the relative L2 error per sample (PhysicsNeMo's LpLoss, the Darcy recipe's)
// and the mean Huber loss, with the two pieces they are made of. shardrt-train and the C API's train_step use
// them; they are compositions of the sharded ops (patches/ops.h), which own every collective and backward.
#pragma once
#include "patches/shard_tensor.h"

namespace shardrt::models {

// Per sample: the sum over every point (dims 1..), completed over the domain axes (the local sums are Partial
// there), so the result is (B,) placed like the samples. One all_reduce per domain axis; its adjoint is local.
ShardTensor per_sample_sum(const ShardTensor& x);

// mean_b s_b over the GLOBAL batch for per-sample values s_b >= 0 (a Replicate scalar on every rank).
ShardTensor batch_mean(const ShardTensor& per_sample);

// mean_b ||p_b - t_b|| / ||t_b||, the target taken as data (no grad).
ShardTensor per_sample_relative_l2_loss(const ShardTensor& pred, const ShardTensor& target);

// mean over samples and points of Huber(p - t) with threshold `delta`.
ShardTensor mean_huber_loss(const ShardTensor& pred, const ShardTensor& target, double delta);

}  // namespace shardrt::models
