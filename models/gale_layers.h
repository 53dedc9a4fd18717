// Small pieces GALE and the GeoTransolver context projectors share:
//   TokenProjection  — nn.Linear on (B, N, C) tokens, or, on a structured grid, the 3x3 nn.Conv2d / nn.Conv3d
//                      (stride 1, padding 1) PhysicsNeMo applies to the tokens viewed as (B, C, *grid). Keys
//                      `weight` [out, in] or [out, in, 3, 3(, 3)] and `bias` [out]. On a row-sharded grid (whole
//                      rows per rank) the conv is the sharded conv's halo path: one halo_exchange of one row each
//                      way (an all_to_all_v window for thinner or zero-size shards), and the same back.
//   ConcreteDropout  — `p_logit` [] (log(p0 / (1 - p0)), p0 = clamp(max(dropout, 0.05), 0.01, 0.99)). In eval mode
//                      (the default, Module::train) the identity; in training mode the relaxed Bernoulli mask
//                      (models/concrete_dropout.h) with PhysicsNeMo's temperature 0.1, p_logit clamped to ±10 in
//                      place first, as PhysicsNeMo does. Its draws come from the forward's noise state (counter-based,
//                      the global element index: the same noise on every mesh). p_logit meets x through the
//                      elementwise patch, so its grad is summed over the axes that shard x once (none for the
//                      replicated context tokens).
//   orthogonal_init  — torch.nn.init.orthogonal_'s distribution (QR of a Gaussian, sign-fixed) from our generator.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "models/gale_slices.h"
#include "models/layers.h"

namespace shardrt::models {

class TokenProjection : public Module {
 public:
  // `grid`: none for a Linear, (Hs, Ws) or (Hs, Ws, Ds) for the conv.
  TokenProjection(int64_t in, int64_t out, std::optional<std::vector<int64_t>> grid, DType dtype);
  // x (B, N, in) -> (B, N, out), N = Hs*Ws(*Ds) row-major for the conv (every rank's N a multiple of Ws(*Ds)).
  ShardTensor forward(const ShardTensor& x) const;
  // torch's default: U(±1/sqrt(fan_in)) for weight and bias, fan_in = in * 3^d for the conv.
  void init_torch_default(Generator& gen);

  int64_t in_features, out_features;
  std::optional<std::vector<int64_t>> grid;
  Tensor weight, bias;
};

class ConcreteDropout : public Module {
 public:
  ConcreteDropout(double dropout, DType dtype);
  ShardTensor forward(const ShardTensor& x, GumbelState& noise) const;

  Tensor p_logit;
};

Tensor orthogonal_init(const Shape& shape, DType dtype, Generator& gen);

}  // namespace shardrt::models
