// The building blocks the bundled models share, each with PhysicsNeMo's parameter names: nn.Linear (weight, bias),
// nn.LayerNorm (weight, bias; eps 1e-5), PhysicsNeMo's Mlp (layers.0, layers.2, …: a Linear per pair of widths with
// one activation between them, the activations taking the odd indices).
//
// Forward functions take ShardTensors: the placements of the input decide whether anything is communicated (a
// linear on tokens sharded over a domain axis all-reduces its weight grad in backward, inside the patch).
// Initialisation is the caller's (PhysicsNeMo's models differ: torch defaults for the ViT, trunc-normal 0.02 for the
// Transolver family), through init_torch_default / init_trunc_normal.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/module.h"
#include "patches/ops.h"
#include "runtime/factories.h"

namespace shardrt::models {

// PhysicsNeMo's activation names (physicsnemo get_activation): "gelu" (exact erf), "relu", "silu", "tanh",
// "sigmoid", "identity". Others are a ValueError naming the name and the supported ones.
enum class Activation { gelu, relu, silu, tanh, sigmoid, identity };
Activation activation_from_name(const std::string& model, const std::string& name);
ShardTensor apply_activation(Activation act, const ShardTensor& x);

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, DType dtype);
  ShardTensor forward(const ShardTensor& x) const { return linear(x, weight, bias); }
  // torch's nn.Linear default: weight and bias U(-1/sqrt(in), 1/sqrt(in)).
  void init_torch_default(Generator& gen);
  // Transolver's initialize_weights: weight trunc_normal(0.02, [-2, 2]), bias 0.
  void init_trunc_normal(Generator& gen, double std = 0.02);

  int64_t in_features, out_features;
  Tensor weight, bias;  // [out, in], [out] (undefined without bias)
};

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t channels, DType dtype, double eps = 1e-5);
  ShardTensor forward(const ShardTensor& x) const { return layer_norm(x, {channels}, weight, bias, eps); }

  int64_t channels;
  double eps;
  Tensor weight, bias;  // ones, zeros
};

// PhysicsNeMo's Mlp: widths [in, hidden…, out]; Linear i is `layers.{2i}`, followed (except the last) by the
// activation at `layers.{2i+1}` (no parameters).
class Mlp : public Module {
 public:
  Mlp(const std::vector<int64_t>& widths, Activation act, DType dtype);
  ShardTensor forward(const ShardTensor& x) const;
  void init_trunc_normal(Generator& gen, double std = 0.02);
  void init_torch_default(Generator& gen);

  Activation act;
  std::vector<std::unique_ptr<Linear>> linears;
};

}  // namespace shardrt::models
