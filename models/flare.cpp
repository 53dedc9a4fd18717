#include "models/flare.h"

namespace shardrt::models {

FlareBlock::FlareBlock(int64_t hidden, int64_t heads, int64_t mlp_ratio, int64_t s, Activation act, bool last,
                       int64_t out_dim, DType dtype)
    : last_layer(last), ln_1(hidden, dtype), Attn(hidden, heads, hidden / heads, s, dtype),
      ln_mlp1_norm(hidden, dtype), ln_mlp1_mlp({hidden, hidden * mlp_ratio, hidden}, act, dtype) {
  register_module("ln_1", &ln_1);
  register_module("Attn", &Attn);
  register_module("ln_mlp1.0", &ln_mlp1_norm);
  register_module("ln_mlp1.1", &ln_mlp1_mlp);
  if (last) {
    ln_mlp2_norm = std::make_unique<LayerNorm>(hidden, dtype);
    ln_mlp2_linear = std::make_unique<Linear>(hidden, out_dim, true, dtype);
    register_module("ln_mlp2.0", ln_mlp2_norm.get());
    register_module("ln_mlp2.1", ln_mlp2_linear.get());
  }
}

void FlareBlock::init(Generator& gen) {
  Attn.init(gen);
  ln_mlp1_mlp.init_trunc_normal(gen);
  if (ln_mlp2_linear) ln_mlp2_linear->init_trunc_normal(gen);
  // LayerNorms are constructed at weight 1, bias 0, which is initialize_weights' value for them.
}

ShardTensor FlareBlock::forward(const ShardTensor& x_in) const {
  auto hooks = forward_scope();  // e.g. ZeRO-3's per-block gather (models/module.h)
  ShardTensor x = add(Attn.forward(ln_1.forward(x_in)), x_in);
  x = add(ln_mlp1_mlp.forward(ln_mlp1_norm.forward(x)), x);
  if (last_layer) return ln_mlp2_linear->forward(ln_mlp2_norm->forward(x));
  return x;
}

Flare::Flare(TransolverConfig config, const ModelOptions& options)
    : TransolverShell("flare", std::move(config), options) {
  const TransolverConfig& c = config_;
  for (int64_t i = 0; i < c.n_layers; ++i) {
    blocks.push_back(std::make_unique<FlareBlock>(c.n_hidden, c.n_head, c.mlp_ratio, c.slice_num, act_,
                                                  i == c.n_layers - 1, c.out_dim, dtype_));
    register_module("blocks." + std::to_string(i), blocks.back().get());
  }
  Generator gen(options.seed);
  init_shell(gen);
  for (auto& b : blocks) b->init(gen);
}

std::vector<ShardTensor> Flare::forward(const std::map<std::string, ShardTensor>& inputs) {
  Layout layout;
  ShardTensor h = embed(inputs, layout);
  for (const auto& b : blocks) h = b->forward(h);
  return {finish(h, layout)};
}

std::unique_ptr<Model> build_flare(const Json& config, const ModelOptions& options) {
  ConfigReader reader("flare", config);
  TransolverConfig c = read_transolver_config(reader);
  reader.finish();
  return std::make_unique<Flare>(std::move(c), options);
}

}  // namespace shardrt::models
