#include "models/layers.h"

#include <cmath>

#include "autograd/tape.h"
#include "models/init.h"
#include "runtime/errors.h"

namespace shardrt::models {

Activation activation_from_name(const std::string& model, const std::string& name) {
  if (name == "gelu") return Activation::gelu;
  if (name == "relu") return Activation::relu;
  if (name == "silu") return Activation::silu;
  if (name == "tanh") return Activation::tanh;
  if (name == "sigmoid") return Activation::sigmoid;
  if (name == "identity") return Activation::identity;
  throw ValueError(model + " config: activation '" + name +
                   "' is not supported; use one of gelu, relu, silu, tanh, sigmoid, identity");
}

ShardTensor apply_activation(Activation act, const ShardTensor& x) {
  switch (act) {
    case Activation::gelu: return gelu(x, GeluApprox::none);
    case Activation::relu: return relu(x);
    case Activation::silu: return silu(x);
    case Activation::tanh: return tanh(x);
    case Activation::sigmoid: return sigmoid(x);
    case Activation::identity: return x;
  }
  return x;
}

Linear::Linear(int64_t in, int64_t out, bool with_bias, DType dtype) : in_features(in), out_features(out) {
  SHARDRT_CHECK(in >= 0 && out >= 0, ValueError, "Linear: negative size (in ", in, ", out ", out, ")");
  weight = zeros({out, in}, {dtype});
  register_parameter("weight", &weight);
  if (with_bias) {
    bias = zeros({out}, {dtype});
    register_parameter("bias", &bias);
  }
}

void Linear::init_torch_default(Generator& gen) {
  NoGradGuard no_grad;
  const double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
  weight.copy_(uniform_init(weight.shape(), bound, weight.dtype(), gen));
  if (bias.defined()) bias.copy_(uniform_init(bias.shape(), bound, bias.dtype(), gen));
}

void Linear::init_trunc_normal(Generator& gen, double std) {
  NoGradGuard no_grad;
  weight.copy_(trunc_normal_init(weight.shape(), std, -2.0, 2.0, weight.dtype(), gen));
  if (bias.defined()) bias.copy_(zeros(bias.shape(), {bias.dtype()}));
}

LayerNorm::LayerNorm(int64_t c, DType dtype, double eps_) : channels(c), eps(eps_) {
  weight = ones({c}, {dtype});
  bias = zeros({c}, {dtype});
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

Mlp::Mlp(const std::vector<int64_t>& widths, Activation act_, DType dtype) : act(act_) {
  SHARDRT_CHECK(widths.size() >= 2, ValueError, "Mlp: needs at least an input and an output width");
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    linears.push_back(std::make_unique<Linear>(widths[i], widths[i + 1], true, dtype));
    register_module("layers." + std::to_string(2 * i), linears.back().get());
  }
}

ShardTensor Mlp::forward(const ShardTensor& x) const {
  ShardTensor h = x;
  for (size_t i = 0; i < linears.size(); ++i) {
    h = linears[i]->forward(h);
    if (i + 1 < linears.size()) h = apply_activation(act, h);
  }
  return h;
}

void Mlp::init_trunc_normal(Generator& gen, double std) {
  for (auto& l : linears) l->init_trunc_normal(gen, std);
}

void Mlp::init_torch_default(Generator& gen) {
  for (auto& l : linears) l->init_torch_default(gen);
}

}  // namespace shardrt::models
