// PhysicsNeMo's GeoTransolver (physicsnemo/models/geotransolver/geotransolver.py; models-spec §4). Registry name
// "geotransolver"; config: GeoTransolver.__init__'s arguments with its names and defaults (§4.1).
//
// Keys in PhysicsNeMo's order: context_builder.* (models/context_projector.h), preprocess.{i}.layers.{0,2}.*,
// blocks.{l}.{ln_1, Attn (models/gale.h), ln_mlp1.0, ln_mlp1.1.layers.{0,2}, attn_dropout, ffn_dropout}.*,
// ln_mlp_out.{i}.{0,1}.*, time_fc.{0,2}.* (time_input: present, but a `time` input is rejected as PhysicsNeMo's
// forward rejects it).
//
// Inputs (PhysicsNeMo's forward argument names): `local_embedding` (B, N, f) — or `local_embedding.{i}` per stream
// when functional_dim is a list —, `local_positions` (.{i}) (B, N_i, 3) for local features, `geometry`
// (B, N_geo, geometry_dim), `global_embedding` (B, N_g, global_dim), and with plus the optional uniform draws
// `gumbel_u.<site>` of each slice softmax (see gumbel_sites; PhysicsNeMo's goldens record them). Structured models take (B, *grid, f) or the
// flattened (B, Hs*Ws(*Ds), f) for the streams and the geometry. Outputs: one (B, N_i, out_i) per stream (spatial in,
// spatial out), then the context (B, H, S, Dctx) with return_embedding_states, then each stream's point features
// (B, N_i, C_eff) with return_point_features — PhysicsNeMo's (out, ctx, feats) order.
//
// Layout (input_placements / input_extents): the samples over the first batch axis, the points (or the grid rows)
// over the first domain axis — streams, positions and the geometry each with their own split (a flattened grid in
// whole rows), global tokens replicated there. What each part communicates: docs/models.md "GeoTransolver".
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/context_projector.h"
#include "models/gale.h"
#include "models/model.h"

namespace shardrt::models {

struct GeoTransolverConfig {
  std::vector<int64_t> functional_dim, out_dim;
  bool tuple_streams = false;  // functional_dim given as a list: inputs and outputs are named .{i}
  std::optional<int64_t> geometry_dim, global_dim;
  int64_t n_layers = 4, n_hidden = 256;
  double dropout = 0.0;
  int64_t n_head = 8;
  std::string act = "gelu";
  int64_t mlp_ratio = 4, slice_num = 32;
  bool use_te = false, time_input = false, plus = false, include_local_features = false;
  std::vector<double> radii = {0.05, 0.25};
  std::vector<int64_t> neighbors_in_radius = {8, 32};
  int64_t n_hidden_local = 32;
  std::optional<std::vector<int64_t>> structured_shape;
  std::string attention_type = "GALE";
  bool concrete_dropout = false;
  std::string state_mixing_mode = "weighted";

  int64_t effective_hidden() const {
    return include_local_features ? n_hidden + n_hidden_local * static_cast<int64_t>(radii.size()) : n_hidden;
  }
};

// Reads and validates every argument as PhysicsNeMo does (ValueErrors naming the argument), plus what ShardRT
// does not run (use_te).
GeoTransolverConfig read_geotransolver_config(const Json& config);

class GaleBlock : public Module {
 public:
  GaleBlock(const GeoTransolverConfig& c, int64_t context_dim, Activation act, DType dtype);
  std::vector<ShardTensor> forward(const std::vector<ShardTensor>& xs, const ShardTensor& context,
                                   GumbelState& noise) const;
  void init_torch_default(Generator& gen);

  LayerNorm ln_1;
  std::unique_ptr<GaleAttention> Attn;
  LayerNorm ln_mlp1_norm;  // ln_mlp1.0
  Mlp ln_mlp1_mlp;         // ln_mlp1.1
  std::unique_ptr<ConcreteDropout> attn_dropout, ffn_dropout;
};

class GeoTransolver : public Model {
 public:
  GeoTransolver(GeoTransolverConfig config, const ModelOptions& options);

  std::string kind() const override { return "geotransolver"; }
  std::vector<ModelInput> inputs() const override;
  Placements input_placements(const std::string& name, const Shape& global_shape, const Mesh& mesh) const override;
  AxisExtents input_extents(const std::string& name, const Shape& global_shape, const Mesh& mesh) const override;
  std::vector<ShardTensor> forward(const std::map<std::string, ShardTensor>& inputs) override;
  // zero3's units, in forward order: context_builder (when it has parameters: the context is built once and its
  // parameters are used nowhere else — every block reads the finished context, an activation), preprocess.{i},
  // blocks.{l}. The root unit: ln_mlp_out.* and time_fc.* (never run: `time` is rejected).
  std::vector<std::string> forward_blocks() const override;

  const GeoTransolverConfig& config() const { return config_; }
  int64_t context_dim() const { return context_builder.context_dim(); }
  std::string stream_input(const std::string& base, size_t i) const;
  // Plus mode's noise sites, in call order; each takes an optional input `gumbel_u.<site>`.
  std::vector<std::string> gumbel_sites() const;

  // PhysicsNeMo's keyword flags of forward (§4.2): extra outputs after the per-stream outputs.
  bool return_embedding_states = false, return_point_features = false;
  // The uniform draws of plus mode's Gumbel noise (models/gale_slices.h); empty: philox_gumbel(seed).
  GumbelSource gumbel_source;
  // Concrete dropout in training mode (Module::train): the draws of a forward are keyed by (dropout_seed, the step),
  // and each training forward advances dropout_step, so every step draws fresh masks; a caller that resumes a run
  // sets it to the steps already taken. Default seed: the model's seed.
  uint64_t dropout_seed = 0, dropout_step = 0;

  GlobalContextBuilder context_builder;
  std::vector<std::unique_ptr<Mlp>> preprocess;
  std::vector<std::unique_ptr<GaleBlock>> blocks;
  std::vector<std::unique_ptr<LayerNorm>> ln_mlp_out_norm;  // ln_mlp_out.{i}.0
  std::vector<std::unique_ptr<Linear>> ln_mlp_out_linear;   // ln_mlp_out.{i}.1
  std::unique_ptr<Linear> time_fc0, time_fc2;               // time_input only (never used: time is rejected)

 private:
  void check_inputs(const std::map<std::string, ShardTensor>& inputs) const;
  GeoTransolverConfig config_;
  Activation act_;
  uint64_t seed_;
};

std::unique_ptr<Model> build_geotransolver(const Json& config, const ModelOptions& options);

}  // namespace shardrt::models
