// Parameter initialisation with the distributions PhysicsNeMo's modules use, drawn from ShardRT's Philox generator
// (the same seed gives the same weights on every rank and every run; bit-equality with torch's RNG is not a goal:
// checkpoints carry the weights that matter).
#pragma once
#include "runtime/factories.h"
#include "runtime/tensor.h"

namespace shardrt::models {

// U(-bound, bound): torch's default for nn.Linear / nn.ConvNd weights and biases is bound = 1/sqrt(fan_in)
// (kaiming_uniform with a = sqrt(5) gives exactly that for the weight).
Tensor uniform_init(const Shape& shape, double bound, DType dtype, Generator& gen);
// N(0, std) truncated to [lo, hi] (absolute bounds, as torch.nn.init.trunc_normal_), by resampling.
Tensor trunc_normal_init(const Shape& shape, double std, double lo, double hi, DType dtype, Generator& gen);
Tensor normal_init(const Shape& shape, double std, DType dtype, Generator& gen);

}  // namespace shardrt::models
