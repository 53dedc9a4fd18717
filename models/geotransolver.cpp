#include "models/geotransolver.h"

#include <sstream>

#include "autograd/tape.h"
#include "models/transolver_shell.h"
#include "runtime/errors.h"

namespace shardrt::models {

namespace {

constexpr const char* kModel = "geotransolver";

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

std::vector<double> read_numbers(Json& config, const std::string& key, const std::vector<double>& fallback) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) {
    if (it != config.end()) config.erase(it);
    return fallback;
  }
  SHARDRT_CHECK(it->is_array(), ValueError, kModel, " config: key '", key, "' must be a list of numbers, got ",
                it->dump());
  std::vector<double> out;
  for (const Json& e : *it) {
    SHARDRT_CHECK(e.is_number(), ValueError, kModel, " config: key '", key, "' must be a list of numbers, got ",
                  it->dump());
    out.push_back(e.get<double>());
  }
  config.erase(it);
  return out;
}

ContextConfig context_config(const GeoTransolverConfig& c) {
  ContextConfig k;
  k.n_streams = static_cast<int64_t>(c.functional_dim.size());
  k.geometry_dim = c.geometry_dim;
  k.global_dim = c.global_dim;
  k.radii = c.radii;
  k.neighbors_in_radius = c.neighbors_in_radius;
  k.n_hidden_local = c.n_hidden_local;
  k.n_hidden = c.n_hidden;
  k.n_head = c.n_head;
  k.slice_num = c.slice_num;
  k.dropout = c.dropout;
  k.plus = c.plus;
  k.include_local_features = c.include_local_features;
  k.concrete_dropout = c.concrete_dropout;
  k.structured_shape = c.structured_shape;
  return k;
}

// (B, *grid, C) -> (B, N, C); a sharded first grid dim (rows) merges with the ones after it (no collective).
ShardTensor as_tokens(const ShardTensor& x) {
  if (x.dim() == 3) return x;
  const Shape& s = x.global_shape();
  int64_t n = 1;
  for (size_t i = 1; i + 1 < s.size(); ++i) n *= s[i];
  return reshape(x, {s[0], n, s.back()});
}

}  // namespace

GeoTransolverConfig read_geotransolver_config(const Json& config_in) {
  Json config = config_in.is_null() ? Json::object() : config_in;
  GeoTransolverConfig c;
  // Float lists are read here (the reader's typed getters take integers); the keys are removed before it checks.
  if (config.is_object()) c.radii = read_numbers(config, "radii", c.radii);
  ConfigReader r(kModel, config);
  const bool tuple_f = config.contains("functional_dim") && config["functional_dim"].is_array();
  const bool tuple_o = config.contains("out_dim") && config["out_dim"].is_array();
  SHARDRT_CHECK(config.contains("functional_dim") && config.contains("out_dim"), ValueError, kModel,
                " config: functional_dim and out_dim are required");
  c.functional_dim = r.integers("functional_dim", {}, true);
  c.out_dim = r.integers("out_dim", {}, true);
  c.tuple_streams = tuple_f || tuple_o;
  c.geometry_dim = r.optional_integer("geometry_dim");
  c.global_dim = r.optional_integer("global_dim");
  read_transolver_block_args(r, c);
  c.use_te = r.boolean("use_te", c.use_te);
  c.time_input = r.boolean("time_input", c.time_input);
  c.plus = r.boolean("plus", c.plus);
  c.include_local_features = r.boolean("include_local_features", c.include_local_features);
  if (auto k = r.optional_integers("neighbors_in_radius")) c.neighbors_in_radius = *k;
  c.n_hidden_local = r.integer("n_hidden_local", c.n_hidden_local);
  c.structured_shape = r.optional_integers("structured_shape");
  c.attention_type = r.string("attention_type", c.attention_type);
  c.concrete_dropout = r.boolean("concrete_dropout", c.concrete_dropout);
  c.state_mixing_mode = r.string("state_mixing_mode", c.state_mixing_mode);
  r.finish();

  SHARDRT_CHECK(!c.use_te, ValueError, kModel,
                " config: use_te=true (Transformer Engine layers, other parameter names) is not supported by ShardRT; "
                "set use_te=false (PhysicsNeMo's default for this model)");
  SHARDRT_CHECK(!c.functional_dim.empty() && c.functional_dim.size() == c.out_dim.size(), ValueError, kModel,
                " config: functional_dim ", shape_str(c.functional_dim), " and out_dim ", shape_str(c.out_dim),
                " must be the same length (one entry per input stream)");
  for (size_t i = 0; i < c.functional_dim.size(); ++i)
    SHARDRT_CHECK(c.functional_dim[i] >= 1 && c.out_dim[i] >= 1, ValueError, kModel, " config: functional_dim ",
                  shape_str(c.functional_dim), " and out_dim ", shape_str(c.out_dim), " must be >= 1");
  SHARDRT_CHECK(c.n_head > 0, ValueError, kModel, " config: GeoTransolver requires n_head > 0, got ", c.n_head);
  SHARDRT_CHECK(c.n_layers >= 1 && c.n_hidden >= 1 && c.mlp_ratio >= 1 && c.slice_num >= 1, ValueError, kModel,
                " config: n_layers=", c.n_layers, ", n_hidden=", c.n_hidden, ", mlp_ratio=", c.mlp_ratio,
                " and slice_num=", c.slice_num, " must all be >= 1");
  SHARDRT_CHECK(c.n_hidden % c.n_head == 0, ValueError, kModel, " config: n_hidden=", c.n_hidden,
                " must be divisible by n_head=", c.n_head, " (remainder ", c.n_hidden % c.n_head, ")");
  SHARDRT_CHECK(c.attention_type == "GALE" || c.attention_type == "GALE_FA", ValueError, kModel,
                " config: attention_type '", c.attention_type, "' is invalid; expected 'GALE' or 'GALE_FA'");
  (void)state_mixing_from_name(kModel, c.state_mixing_mode);
  activation_from_name(kModel, c.act);
  if (c.structured_shape) {
    const auto& s = *c.structured_shape;
    SHARDRT_CHECK(!c.include_local_features, ValueError, kModel,
                  " config: include_local_features=true is not supported with structured_shape ", shape_str(s),
                  " (the ball query is for point clouds)");
    SHARDRT_CHECK(s.size() == 2 || s.size() == 3, ValueError, kModel, " config: structured_shape ", shape_str(s),
                  " must have length 2 or 3");
    for (int64_t e : s)
      SHARDRT_CHECK(e > 0, ValueError, kModel, " config: structured_shape ", shape_str(s), " must be positive");
  }
  if (c.include_local_features) {
    SHARDRT_CHECK(c.radii.size() == c.neighbors_in_radius.size() && !c.radii.empty(), ValueError, kModel,
                  " config: radii (", c.radii.size(), " entries) and neighbors_in_radius ",
                  shape_str(c.neighbors_in_radius), " need one entry each per scale");
    for (int64_t k : c.neighbors_in_radius)
      SHARDRT_CHECK(k >= 1, ValueError, kModel, " config: neighbors_in_radius ", shape_str(c.neighbors_in_radius),
                    " must be >= 1");
    SHARDRT_CHECK(c.n_hidden_local >= 2, ValueError, kModel, " config: n_hidden_local=", c.n_hidden_local,
                  " must be >= 2");
    // The ball query runs on xyz on both sides (BQWarp checks it). Without geometry PhysicsNeMo builds blocks of
    // C_eff but no extractor to fill the extra channels, and its forward fails: an error here instead.
    SHARDRT_CHECK(c.geometry_dim && *c.geometry_dim == 3, ValueError, kModel,
                  " config: include_local_features=true needs geometry_dim=3 (the ball query runs on xyz), got "
                  "geometry_dim=", c.geometry_dim ? std::to_string(*c.geometry_dim) : std::string("None"));
  }
  return c;
}

// ---- GaleBlock ----------------------------------------------------------------------------------------------

namespace {
GaleOptions gale_options(const GeoTransolverConfig& c, int64_t context_dim) {
  GaleOptions o;
  o.dim = c.effective_hidden();
  o.heads = c.n_head;
  o.dim_head = o.dim / c.n_head;  // H*D < C_eff when C_eff % H != 0 (quirk 3)
  o.slice_num = c.slice_num;
  o.context_dim = context_dim;
  o.dropout = c.dropout;
  o.plus = c.plus;
  o.concrete_dropout = c.concrete_dropout;
  o.mixing = state_mixing_from_name(kModel, c.state_mixing_mode);
  if (c.attention_type == "GALE") o.grid = c.structured_shape;
  return o;
}
}  // namespace

GaleBlock::GaleBlock(const GeoTransolverConfig& c, int64_t context_dim, Activation act, DType dtype)
    : ln_1(c.effective_hidden(), dtype), ln_mlp1_norm(c.effective_hidden(), dtype),
      ln_mlp1_mlp({c.effective_hidden(), c.effective_hidden() * c.mlp_ratio, c.effective_hidden()}, act, dtype) {
  const GaleOptions o = gale_options(c, context_dim);
  if (c.attention_type == "GALE") Attn = std::make_unique<Gale>(o, dtype);
  else Attn = std::make_unique<GaleFA>(o, dtype);
  register_module("ln_1", &ln_1);
  register_module("Attn", Attn.get());
  register_module("ln_mlp1.0", &ln_mlp1_norm);
  register_module("ln_mlp1.1", &ln_mlp1_mlp);
  if (c.concrete_dropout) {
    attn_dropout = std::make_unique<ConcreteDropout>(c.dropout, dtype);
    ffn_dropout = std::make_unique<ConcreteDropout>(c.dropout, dtype);
    register_module("attn_dropout", attn_dropout.get());
    register_module("ffn_dropout", ffn_dropout.get());
  }
}

void GaleBlock::init_torch_default(Generator& gen) {
  Attn->init_torch_default(gen);
  ln_mlp1_mlp.init_torch_default(gen);
}

std::vector<ShardTensor> GaleBlock::forward(const std::vector<ShardTensor>& xs, const ShardTensor& context,
                                            GumbelState& noise) const {
  auto hooks = forward_scope();  // e.g. ZeRO-3's per-block gather (models/module.h)
  std::vector<ShardTensor> normed;
  for (const ShardTensor& x : xs) normed.push_back(ln_1.forward(x));
  const std::vector<ShardTensor> attn = Attn->forward(normed, context, noise);
  std::vector<ShardTensor> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    ShardTensor x = add(attn[i], xs[i]);
    if (attn_dropout) x = attn_dropout->forward(x, noise);
    x = add(ln_mlp1_mlp.forward(ln_mlp1_norm.forward(x)), x);
    if (ffn_dropout) x = ffn_dropout->forward(x, noise);
    out.push_back(x);
  }
  return out;
}

// ---- GeoTransolver ------------------------------------------------------------------------------------------

GeoTransolver::GeoTransolver(GeoTransolverConfig config, const ModelOptions& options)
    : context_builder(context_config(config), options.dtype), config_(std::move(config)),
      act_(activation_from_name(kModel, config_.act)), seed_(options.seed) {
  dropout_seed = options.seed + 0x636f6e63ull;  // "conc": apart from the Gumbel draws' seeds
  const GeoTransolverConfig& c = config_;
  const DType dtype = options.dtype;
  register_module("context_builder", &context_builder);
  for (size_t i = 0; i < c.functional_dim.size(); ++i) {
    preprocess.push_back(
        std::make_unique<Mlp>(std::vector<int64_t>{c.functional_dim[i], 2 * c.n_hidden, c.n_hidden}, act_, dtype));
    register_module("preprocess." + std::to_string(i), preprocess.back().get());
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    blocks.push_back(std::make_unique<GaleBlock>(c, context_builder.context_dim(), act_, dtype));
    register_module("blocks." + std::to_string(l), blocks.back().get());
    blocks.back()->Attn->noise_site = "blocks." + std::to_string(l) + ".Attn";
  }
  const int64_t ce = c.effective_hidden();
  for (size_t i = 0; i < c.out_dim.size(); ++i) {
    ln_mlp_out_norm.push_back(std::make_unique<LayerNorm>(ce, dtype));
    ln_mlp_out_linear.push_back(std::make_unique<Linear>(ce, c.out_dim[i], true, dtype));
    register_module("ln_mlp_out." + std::to_string(i) + ".0", ln_mlp_out_norm.back().get());
    register_module("ln_mlp_out." + std::to_string(i) + ".1", ln_mlp_out_linear.back().get());
  }
  if (c.time_input) {
    time_fc0 = std::make_unique<Linear>(c.n_hidden, c.n_hidden, true, dtype);
    time_fc2 = std::make_unique<Linear>(c.n_hidden, c.n_hidden, true, dtype);
    register_module("time_fc.0", time_fc0.get());
    register_module("time_fc.2", time_fc2.get());
  }
  // GeoTransolver has no initialize_weights: torch's defaults everywhere, GALE's slice Linear orthogonal.
  Generator gen(options.seed);
  context_builder.init_torch_default(gen);
  for (auto& p : preprocess) p->init_torch_default(gen);
  for (auto& b : blocks) b->init_torch_default(gen);
  for (auto& l : ln_mlp_out_linear) l->init_torch_default(gen);
  if (time_fc0) time_fc0->init_torch_default(gen), time_fc2->init_torch_default(gen);
}

std::vector<std::string> GeoTransolver::forward_blocks() const {
  std::vector<std::string> out;
  if (!context_builder.named_parameters().empty()) out.push_back("context_builder");
  for (size_t i = 0; i < preprocess.size(); ++i) out.push_back("preprocess." + std::to_string(i));
  for (size_t l = 0; l < blocks.size(); ++l) out.push_back("blocks." + std::to_string(l));
  return out;
}

std::string GeoTransolver::stream_input(const std::string& base, size_t i) const {
  return config_.tuple_streams ? base + "." + std::to_string(i) : base;
}

std::vector<ModelInput> GeoTransolver::inputs() const {
  const GeoTransolverConfig& c = config_;
  const std::string grid = c.structured_shape ? " or (B, *structured_shape, " : "";
  std::vector<ModelInput> in;
  for (size_t i = 0; i < c.functional_dim.size(); ++i) {
    const std::string f = std::to_string(c.functional_dim[i]);
    in.push_back({stream_input("local_embedding", i), "(B, N, " + f + ")" + (grid.empty() ? "" : grid + f + ")"), true});
  }
  if (c.include_local_features)
    for (size_t i = 0; i < c.functional_dim.size(); ++i)
      in.push_back({stream_input("local_positions", i), "(B, N, 3)", true});
  if (c.geometry_dim) {
    const std::string g = std::to_string(*c.geometry_dim);
    in.push_back({"geometry", "(B, N_geo, " + g + ")" + (grid.empty() ? "" : grid + g + ")"), true});
  }
  if (c.global_dim) in.push_back({"global_embedding", "(B, N_g, " + std::to_string(*c.global_dim) + ")", true});
  in.push_back({"time", "(B,) (rejected: PhysicsNeMo's forward raises NotImplementedError)", false});
  for (const std::string& site : gumbel_sites())
    in.push_back({"gumbel_u." + site, "(B, M, H, S) in [0, 1): plus mode's uniform draws at " + site +
                                          " (default: ShardRT's generator)", false});
  return in;
}

std::vector<std::string> GeoTransolver::gumbel_sites() const {
  const GeoTransolverConfig& c = config_;
  std::vector<std::string> sites;
  if (!c.plus) return sites;
  for (const auto& e : context_builder.local_extractors)
    for (const auto& t : e->tokenizers) sites.push_back(t->noise_site);
  if (context_builder.geometry_tokenizer) sites.push_back(context_builder.geometry_tokenizer->noise_site);
  if (context_builder.global_tokenizer) sites.push_back(context_builder.global_tokenizer->noise_site);
  if (c.attention_type == "GALE")
    for (const auto& b : blocks)
      for (size_t i = 0; i < c.functional_dim.size(); ++i) sites.push_back(b->Attn->noise_site + "." + std::to_string(i));
  return sites;
}

Placements GeoTransolver::input_placements(const std::string& name, const Shape& global_shape,
                                           const Mesh& mesh) const {
  bool known = false;
  for (const ModelInput& in : inputs()) known |= in.name == name;
  SHARDRT_CHECK(known, ValueError, kModel, ": unknown input '", name, "'");
  // The draws of the global tokenizer follow the global tokens; every other site's follow its points.
  const bool per_point = name != "global_embedding" && name != "time" &&
                         name != "gumbel_u.context_builder.global_tokenizer" && global_shape.size() >= 3;
  return samples_and_domain(mesh, per_point ? 1 : -1);
}

AxisExtents GeoTransolver::input_extents(const std::string& name, const Shape& global_shape, const Mesh& mesh) const {
  // A flattened structured input (B, Hs*Ws(*Ds), C) is split in whole grid rows, so that the conv projections see
  // whole rows; spatial inputs split their rows by the default rule already.
  if (!config_.structured_shape || global_shape.size() != 3 || name == "global_embedding" ||
      name.rfind("gumbel_u.", 0) == 0)
    return {};
  const std::vector<int64_t>& sp = *config_.structured_shape;
  const int64_t row = product(sp) / sp[0];
  if (global_shape[1] != product(sp)) return {};
  const SampleDomainAxes a = sample_domain_axes(mesh);
  AxisExtents e(static_cast<size_t>(mesh.ndim()));
  if (a.batch >= 0) e[a.batch] = split_extents(global_shape[0], mesh.shape()[a.batch]);
  if (a.domain >= 0) {
    Extents rows = split_extents(sp[0], mesh.shape()[a.domain]);
    for (int64_t& r : rows) r *= row;
    e[a.domain] = rows;
  }
  return e;
}

void GeoTransolver::check_inputs(const std::map<std::string, ShardTensor>& inputs) const {
  const GeoTransolverConfig& c = config_;
  if (inputs.count("time"))
    throw ValueError(std::string(kModel) + ": input 'time' " + shape_str(inputs.at("time").global_shape()) +
                     " was given, but GeoTransolver's forward does not implement time (PhysicsNeMo raises "
                     "NotImplementedError even with time_input=true); leave 'time' out");
  check_input_names(*this, inputs);
  const std::vector<int64_t> sp = c.structured_shape.value_or(std::vector<int64_t>{});
  int64_t batch = -1;
  // One per-point input: (B, N, C) or, structured, (B, *grid, C) / (B, prod(grid), C). Returns N.
  auto check_points = [&](const std::string& name, int64_t channels, const std::string& what) {
    const Shape& s = inputs.at(name).global_shape();
    const bool spatial = !sp.empty() && s.size() == sp.size() + 2;
    SHARDRT_CHECK(s.size() == 3 || spatial, ShapeError, kModel, ": input '", name, "' is ", shape_str(s),
                  "; expected (B, N, ", channels, ")", sp.empty() ? "" : " or (B, *structured_shape, C)");
    if (spatial)
      SHARDRT_CHECK(std::vector<int64_t>(s.begin() + 1, s.end() - 1) == sp, ShapeError, kModel, ": input '", name,
                    "' is ", shape_str(s), ": its spatial shape differs from structured_shape ", shape_str(sp));
    const int64_t n = spatial ? product(sp) : s[1];
    if (!sp.empty())
      SHARDRT_CHECK(n == product(sp), ShapeError, kModel, ": input '", name, "' is ", shape_str(s), " with ", n,
                    " points; a structured model takes the ", product(sp), " points of structured_shape ",
                    shape_str(sp));
    SHARDRT_CHECK(s.back() == channels, ShapeError, kModel, ": input '", name, "' is ", shape_str(s), " with ",
                  s.back(), " channels; the model takes ", what, "=", channels);
    if (batch < 0) batch = s[0];
    SHARDRT_CHECK(s[0] == batch, ShapeError, kModel, ": input '", name, "' is ", shape_str(s),
                  " but the other inputs have batch ", batch);
    return n;
  };
  for (size_t i = 0; i < c.functional_dim.size(); ++i) {
    const int64_t n = check_points(stream_input("local_embedding", i), c.functional_dim[i],
                                   c.tuple_streams ? "functional_dim[" + std::to_string(i) + "]" : "functional_dim");
    if (c.include_local_features) {
      const std::string pn = stream_input("local_positions", i);
      const Shape& ps = inputs.at(pn).global_shape();
      SHARDRT_CHECK(ps.size() == 3 && ps[1] == n && ps[2] == 3, ShapeError, kModel, ": input '", pn, "' is ",
                    shape_str(ps), "; expected (B, ", n, ", 3): the xyz of each point of '",
                    stream_input("local_embedding", i), "'");
      (void)check_points(pn, 3, "xyz");
    }
  }
  if (c.geometry_dim) (void)check_points("geometry", *c.geometry_dim, "geometry_dim");
  if (c.global_dim) {
    const Shape& g = inputs.at("global_embedding").global_shape();
    SHARDRT_CHECK(g.size() == 3 && g[0] == batch && g[2] == *c.global_dim, ShapeError, kModel,
                  ": input 'global_embedding' is ", shape_str(g), "; expected (", batch, ", N_g, ", *c.global_dim,
                  ")");
  }
}

std::vector<ShardTensor> GeoTransolver::forward(const std::map<std::string, ShardTensor>& inputs) {
  check_inputs(inputs);
  const GeoTransolverConfig& c = config_;
  const size_t streams = c.functional_dim.size();
  std::vector<ShardTensor> le, pos;
  std::vector<bool> spatial;
  for (size_t i = 0; i < streams; ++i) {
    const ShardTensor& x = inputs.at(stream_input("local_embedding", i));
    spatial.push_back(x.dim() != 3);
    le.push_back(as_tokens(x));
    if (c.include_local_features) pos.push_back(as_tokens(inputs.at(stream_input("local_positions", i))));
  }
  const ShardTensor geometry = c.geometry_dim ? as_tokens(inputs.at("geometry")) : ShardTensor();
  const ShardTensor global = c.global_dim ? inputs.at("global_embedding") : ShardTensor();

  std::map<std::string, ShardTensor> draws;
  for (const auto& [name, t] : inputs)
    if (name.rfind("gumbel_u.", 0) == 0) draws[name] = t;
  GumbelState noise{gumbel_source ? gumbel_source : philox_gumbel(seed_), 0, &draws};
  noise.dropout_seed = dropout_seed;
  if (training()) noise.dropout_step = dropout_step++;
  const BuiltContext ctx = context_builder.build(pos, geometry, global, noise);
  std::vector<ShardTensor> x;
  for (size_t i = 0; i < streams; ++i) {
    ShardTensor h;
    {
      auto hooks = preprocess[i]->forward_scope();  // a zero3 unit of its own (forward_blocks)
      h = preprocess[i]->forward(le[i]);
    }
    if (!ctx.local_features.empty()) h = cat({h, ctx.local_features[i]}, -1);
    x.push_back(h);
  }
  for (const auto& b : blocks) x = b->forward(x, ctx.context, noise);

  std::vector<ShardTensor> out;
  for (size_t i = 0; i < streams; ++i) {
    ShardTensor y = ln_mlp_out_linear[i]->forward(ln_mlp_out_norm[i]->forward(x[i]));
    if (spatial[i]) {
      Shape s = {y.global_shape()[0]};
      for (int64_t e : *c.structured_shape) s.push_back(e);
      s.push_back(y.global_shape().back());
      y = reshape(y, s);
    }
    out.push_back(y);
  }
  if (return_embedding_states) {
    SHARDRT_CHECK(ctx.context.defined(), ValueError, kModel,
                  ": return_embedding_states=true, but the model has no context (no geometry_dim or global_dim)");
    out.push_back(ctx.context);
  }
  if (return_point_features)
    for (const ShardTensor& f : x) out.push_back(f);
  return out;
}

std::unique_ptr<Model> build_geotransolver(const Json& config, const ModelOptions& options) {
  return std::make_unique<GeoTransolver>(read_geotransolver_config(config), options);
}

}  // namespace shardrt::models
