// The Transolver shell that PhysicsNeMo's Transolver-family models share (FLARE now, GeoTransolver next): the
// constructor arguments, the input embedding (unified-position grid buffer or a given embedding, concatenated in
// front of fx), the preprocess Mlp, the time embedding, and the reshaping of structured (spatial) inputs to tokens
// and back. A model derives from TransolverShell and registers its blocks after the shell's modules, which gives
// PhysicsNeMo's state_dict order: embedding (buffer), preprocess.*, time_embed.freqs, time_fc.{0,2}.*, blocks.*.
//
// Layout on a mesh: fx and embedding carry the batch over the batch axes and the points (or the first spatial dim,
// the image rows) over the domain axes; time carries the batch like fx and is replicated over domain. Everything
// here is local per point except the time term, which is per sample: its features are computed once per sample and
// broadcast over the points (the elementwise patch then sums time_fc's grad over domain once).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/layers.h"
#include "models/model.h"

namespace shardrt::models {

// Transolver.__init__'s arguments (FLARE passes them through), with PhysicsNeMo's names and defaults.
struct TransolverConfig {
  int64_t functional_dim = 0, out_dim = 0;
  std::optional<int64_t> embedding_dim;
  int64_t n_layers = 4, n_hidden = 256;
  double dropout = 0.0;
  int64_t n_head = 8;
  std::string act = "gelu";
  int64_t mlp_ratio = 4, slice_num = 32;
  bool unified_pos = false;
  int64_t ref = 8;
  std::optional<std::vector<int64_t>> structured_shape;
  bool time_input = false;
  bool use_te = false;
};

// Reads every argument (the caller calls reader.finish()) and validates them as PhysicsNeMo does, plus what ShardRT
// does not run (use_te, dropout > 0): ValueErrors naming the model and the argument.
TransolverConfig read_transolver_config(ConfigReader& reader);

// The block arguments every Transolver-family model takes under the same names (Transolver, FLARE, GeoTransolver),
// read into any config with those fields; a field's value on entry is the model's own default.
template <class Config>
void read_transolver_block_args(ConfigReader& r, Config& c) {
  c.n_layers = r.integer("n_layers", c.n_layers);
  c.n_hidden = r.integer("n_hidden", c.n_hidden);
  c.dropout = r.number("dropout", c.dropout);
  c.n_head = r.integer("n_head", c.n_head);
  c.act = r.string("act", c.act);
  c.mlp_ratio = r.integer("mlp_ratio", c.mlp_ratio);
  c.slice_num = r.integer("slice_num", c.slice_num);
}

// The unified positional grid, (1, Hs*Ws, ref*ref): the distance of each grid point (linspace(0, 1) per axis) to
// each point of a ref x ref reference grid. Computed in f64, then converted to `dtype` (PhysicsNeMo's module
// computes it in f32; checkpoints carry the buffer, so loading one overrides this either way).
Tensor unified_position_grid(int64_t hs, int64_t ws, int64_t ref, DType dtype);

// PhysicsNeMo's PositionalEmbedding(num_channels = n, endpoint = False, learnable = False, embed_fn = "cos_sin"):
// a persistent buffer `freqs` [n/2], freqs_k = (1/10000)^(k/(n/2)) (computed in f64), and
// [cos(t freqs), sin(t freqs)].
class TimeEmbedding : public Module {
 public:
  TimeEmbedding(int64_t channels, DType dtype);
  // t (B,) -> (B, channels), placed like t on the batch axes and replicated elsewhere: the local op
  // cos_sin_embedding (models/cos_sin.h) on this rank's samples, so t gets its grad (as in PyTorch) with no
  // collective: t is replicated over the domain, and the features' grad arrives complete (the add that broadcasts
  // them over the sharded points sums it there).
  ShardTensor forward(const ShardTensor& t) const;

  int64_t channels;
  Tensor freqs;
};

class TransolverShell : public Model {
 public:
  TransolverShell(std::string kind, TransolverConfig config, const ModelOptions& options);

  std::string kind() const override { return kind_; }
  std::vector<ModelInput> inputs() const override;
  Placements input_placements(const std::string& name, const Shape& global_shape, const Mesh& mesh) const override;

  const TransolverConfig& config() const { return config_; }

 protected:
  // What embed() learnt about the input that finish() needs to restore its layout.
  struct Layout {
    bool spatial = false;  // fx came as (B, *structured_shape, C): the output goes back to that layout
  };
  // Validates the inputs (names and global shapes; the same error on every rank), then: flatten spatial inputs to
  // (B, N, C), cat [embedding, fx], preprocess, + time_fc(time features). Returns (B, N, n_hidden).
  ShardTensor embed(const std::map<std::string, ShardTensor>& inputs, Layout& layout) const;
  // (B, N, C) back to (B, *structured_shape, C) when the input was spatial.
  ShardTensor finish(const ShardTensor& out, const Layout& layout) const;
  // Transolver.initialize_weights for the shell's own modules: trunc-normal(0.02) Linears, zero biases.
  void init_shell(Generator& gen);

  TransolverConfig config_;
  Activation act_;
  DType dtype_;
  Tensor embedding;  // unified_pos only: (1, Hs*Ws, ref^2)
  std::unique_ptr<Mlp> preprocess;
  std::unique_ptr<TimeEmbedding> time_embed;           // time_input only
  std::unique_ptr<Linear> time_fc0, time_fc2;          // time_fc.0, time_fc.2 (SiLU between)

 private:
  void check_inputs(const std::map<std::string, ShardTensor>& inputs) const;
  std::string kind_;
};

}  // namespace shardrt::models
