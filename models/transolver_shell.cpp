#include "models/transolver_shell.h"

#include <cmath>
#include <sstream>

#include "autograd/tape.h"
#include "models/cos_sin.h"
#include "runtime/errors.h"

namespace shardrt::models {

namespace {

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// linspace(0, 1, n)[i]: i / (n - 1) with the endpoint exact, and [0] for n == 1.
double linspace01(int64_t i, int64_t n) {
  if (n == 1) return 0.0;
  if (i == n - 1) return 1.0;
  return static_cast<double>(i) * (1.0 / static_cast<double>(n - 1));
}

}  // namespace

TransolverConfig read_transolver_config(ConfigReader& r) {
  const std::string& m = r.model();
  TransolverConfig c;
  c.functional_dim = r.integer("functional_dim");
  c.out_dim = r.integer("out_dim");
  c.embedding_dim = r.optional_integer("embedding_dim");
  read_transolver_block_args(r, c);
  c.unified_pos = r.boolean("unified_pos", c.unified_pos);
  c.ref = r.integer("ref", c.ref);
  c.structured_shape = r.optional_integers("structured_shape");
  c.time_input = r.boolean("time_input", c.time_input);
  c.use_te = r.boolean("use_te", c.use_te);

  SHARDRT_CHECK(!c.use_te, ValueError, m,
                " config: use_te=true (Transformer Engine layers, other parameter names) is not supported by ShardRT; "
                "set use_te=false (PhysicsNeMo's default for this model)");
  SHARDRT_CHECK(c.dropout == 0.0, ValueError, m, " config: dropout=", c.dropout,
                " is not supported (ShardRT runs the model without dropout, as PhysicsNeMo does in eval()); set 0.0");
  SHARDRT_CHECK(c.functional_dim >= 0 && c.out_dim >= 1, ValueError, m, " config: functional_dim=", c.functional_dim,
                " and out_dim=", c.out_dim, " must be >= 0 and >= 1");
  SHARDRT_CHECK(c.n_layers >= 1 && c.n_hidden >= 1 && c.n_head >= 1 && c.mlp_ratio >= 1 && c.slice_num >= 1,
                ValueError, m, " config: n_layers=", c.n_layers, ", n_hidden=", c.n_hidden, ", n_head=", c.n_head,
                ", mlp_ratio=", c.mlp_ratio, " and slice_num=", c.slice_num, " must all be >= 1");
  SHARDRT_CHECK(c.n_hidden % c.n_head == 0, ValueError, m, " config: n_hidden=", c.n_hidden,
                " must be divisible by n_head=", c.n_head, " (remainder ", c.n_hidden % c.n_head, ")");
  if (c.structured_shape) {
    const auto& s = *c.structured_shape;
    SHARDRT_CHECK(s.size() == 2 || s.size() == 3, ValueError, m, " config: structured_shape ", shape_str(s),
                  " must have 2 or 3 dims");
    for (int64_t e : s)
      SHARDRT_CHECK(e > 0, ValueError, m, " config: structured_shape ", shape_str(s), " must be positive");
  }
  if (c.unified_pos) {
    SHARDRT_CHECK(c.structured_shape && c.structured_shape->size() == 2, ValueError, m,
                  " config: unified_pos=true needs a 2-D structured_shape (Hs, Ws), got ",
                  c.structured_shape ? shape_str(*c.structured_shape) : std::string("None"));
    SHARDRT_CHECK(c.ref >= 1, ValueError, m, " config: ref=", c.ref, " must be >= 1");
  } else {
    SHARDRT_CHECK(c.embedding_dim.has_value(), ValueError, m,
                  " config: embedding_dim is required when unified_pos=false");
    SHARDRT_CHECK(*c.embedding_dim >= 0, ValueError, m, " config: embedding_dim=", *c.embedding_dim, " is negative");
  }
  SHARDRT_CHECK(!c.time_input || c.n_hidden % 2 == 0, ValueError, m, " config: time_input=true needs an even n_hidden",
                " (cos and sin halves of the time embedding), got ", c.n_hidden);
  return c;
}

Tensor unified_position_grid(int64_t hs, int64_t ws, int64_t ref, DType dtype) {
  std::vector<double> v(static_cast<size_t>(hs * ws * ref * ref));
  size_t k = 0;
  for (int64_t i = 0; i < hs; ++i)
    for (int64_t j = 0; j < ws; ++j)
      for (int64_t a = 0; a < ref; ++a)
        for (int64_t b = 0; b < ref; ++b) {
          const double dx = linspace01(i, hs) - linspace01(a, ref), dy = linspace01(j, ws) - linspace01(b, ref);
          v[k++] = std::sqrt(dx * dx + dy * dy);
        }
  return from_vector(v, {1, hs * ws, ref * ref}, {dtype});
}

TimeEmbedding::TimeEmbedding(int64_t c, DType dtype) : channels(c) {
  const int64_t half = c / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int64_t k = 0; k < half; ++k) f[k] = std::pow(1.0 / 10000.0, static_cast<double>(k) / static_cast<double>(half));
  freqs = from_vector(f, {half}, {dtype});
  register_buffer("freqs", &freqs);
}

ShardTensor TimeEmbedding::forward(const ShardTensor& t) const {
  const Tensor f = freqs.dtype() == t.dtype() ? freqs : shardrt::to_dtype(freqs, t.dtype());
  // (B,) -> (B, channels): the batch dim keeps t's placement and extents; the channels are whole.
  return from_local(cos_sin_embedding(t.local(), f), t.mesh(), t.placements(), t.spec().all_extents());
}

TransolverShell::TransolverShell(std::string kind, TransolverConfig config, const ModelOptions& options)
    : config_(std::move(config)), act_(activation_from_name(kind, config_.act)), dtype_(options.dtype),
      kind_(std::move(kind)) {
  const TransolverConfig& c = config_;
  int64_t c_in = c.functional_dim;
  if (c.unified_pos) {
    embedding = unified_position_grid((*c.structured_shape)[0], (*c.structured_shape)[1], c.ref, dtype_);
    register_buffer("embedding", &embedding);
    c_in += c.ref * c.ref;
  } else {
    c_in += *c.embedding_dim;
  }
  preprocess = std::make_unique<Mlp>(std::vector<int64_t>{c_in, 2 * c.n_hidden, c.n_hidden}, act_, dtype_);
  register_module("preprocess", preprocess.get());
  if (c.time_input) {
    time_embed = std::make_unique<TimeEmbedding>(c.n_hidden, dtype_);
    time_fc0 = std::make_unique<Linear>(c.n_hidden, c.n_hidden, true, dtype_);
    time_fc2 = std::make_unique<Linear>(c.n_hidden, c.n_hidden, true, dtype_);
    register_module("time_embed", time_embed.get());
    register_module("time_fc.0", time_fc0.get());
    register_module("time_fc.2", time_fc2.get());
  }
}

void TransolverShell::init_shell(Generator& gen) {
  preprocess->init_trunc_normal(gen);
  if (time_fc0) time_fc0->init_trunc_normal(gen), time_fc2->init_trunc_normal(gen);
}

std::vector<ModelInput> TransolverShell::inputs() const {
  const std::string sp = config_.structured_shape ? " or (B, *structured_shape, " : "";
  std::vector<ModelInput> in = {{"fx", "(B, N, functional_dim)" + (sp.empty() ? "" : sp + "functional_dim)"), true}};
  if (!config_.unified_pos)
    in.push_back({"embedding", "(B, N, embedding_dim)" + (sp.empty() ? "" : sp + "embedding_dim)"), true});
  if (config_.time_input) in.push_back({"time", "(B,)", false, false});
  return in;
}

Placements TransolverShell::input_placements(const std::string& name, const Shape& global_shape,
                                             const Mesh& mesh) const {
  SHARDRT_CHECK(name == "fx" || name == "embedding" || name == "time", ValueError, kind_, ": unknown input '", name,
                "'; its inputs are fx, embedding, time");
  // The batch over the first batch axis, the points (image rows) over the first domain axis; time has no points.
  if (global_shape.empty()) return Placements(static_cast<size_t>(mesh.ndim()), Placement::Replicate());
  return samples_and_domain(mesh, name != "time" && global_shape.size() >= 3 ? 1 : -1);
}

void TransolverShell::check_inputs(const std::map<std::string, ShardTensor>& inputs) const {
  const TransolverConfig& c = config_;
  const std::string& k = kind_;
  if (inputs.count("time") && !c.time_input)
    throw ValueError(k + ": input 'time' " + shape_str(inputs.at("time").global_shape()) +
                     " was given, but the model was built with time_input=false (no time embedding); "
                     "build it with time_input=true or leave 'time' out");
  if (inputs.count("embedding") && c.unified_pos)
    throw ValueError(k + ": input 'embedding' " + shape_str(inputs.at("embedding").global_shape()) +
                     " was given, but unified_pos=true supplies the positional embedding (the 'embedding' buffer); "
                     "leave it out");
  SHARDRT_CHECK(c.unified_pos || inputs.count("embedding"), ValueError, k,
                ": the input 'embedding' (B, N, embedding_dim=", c.embedding_dim.value_or(0),
                ") is missing; it is required when unified_pos=false");
  check_input_names(*this, inputs);

  const Shape& fx = inputs.at("fx").global_shape();
  const std::vector<int64_t> sp = c.structured_shape.value_or(std::vector<int64_t>{});
  const bool spatial = !sp.empty() && fx.size() == sp.size() + 2;
  if (fx.size() != 3 && !spatial) {
    std::string spatial_form;
    if (!sp.empty()) {
      spatial_form = " or (B";
      for (int64_t e : sp) spatial_form += ", " + std::to_string(e);
      spatial_form += ", " + std::to_string(c.functional_dim) + ")";
    }
    throw ShapeError(k + ": input 'fx' is " + shape_str(fx) + "; expected (B, N, " + std::to_string(c.functional_dim) +
                     ")" + spatial_form);
  }
  if (spatial)
    SHARDRT_CHECK(std::vector<int64_t>(fx.begin() + 1, fx.end() - 1) == sp, ShapeError, k, ": input 'fx' is ",
                  shape_str(fx), ": its spatial shape differs from structured_shape ", shape_str(sp));
  SHARDRT_CHECK(fx.back() == c.functional_dim, ShapeError, k, ": input 'fx' is ", shape_str(fx), " with ", fx.back(),
                " channels; the model takes functional_dim=", c.functional_dim);
  const int64_t batch = fx[0];
  const int64_t points = spatial ? product(sp) : fx[1];
  if (c.unified_pos)
    SHARDRT_CHECK(points == product(sp), ShapeError, k, ": input 'fx' is ", shape_str(fx), " with ", points,
                  " points; unified_pos needs the ", product(sp), " points of structured_shape ", shape_str(sp));
  if (inputs.count("embedding")) {
    const Shape& e = inputs.at("embedding").global_shape();
    const bool e_spatial = !sp.empty() && e.size() == sp.size() + 2 &&
                           std::vector<int64_t>(e.begin() + 1, e.end() - 1) == sp;
    const bool ok = (e.size() == 3 && e[0] == batch && e[1] == points) ||
                    (e_spatial && e[0] == batch && points == product(sp));
    SHARDRT_CHECK(ok, ShapeError, k, ": input 'embedding' is ", shape_str(e), " but 'fx' is ", shape_str(fx),
                  "; the embedding needs fx's batch and points: (", batch, ", ", points, ", embedding_dim)",
                  sp.empty() ? "" : " or fx's spatial layout");
    SHARDRT_CHECK(e.back() == *c.embedding_dim, ShapeError, k, ": input 'embedding' is ", shape_str(e), " with ",
                  e.back(), " channels; the model takes embedding_dim=", *c.embedding_dim);
  }
  if (inputs.count("time")) {
    const Shape& t = inputs.at("time").global_shape();
    SHARDRT_CHECK(t.size() == 1 && t[0] == batch, ShapeError, k, ": input 'time' is ", shape_str(t),
                  "; expected (B,) = (", batch, ") like fx ", shape_str(fx));
  }
}

namespace {

// (B, *spatial, C) -> (B, N, C); a sharded first spatial dim merges with the ones after it (no collective).
ShardTensor as_tokens(const ShardTensor& x) {
  if (x.dim() == 3) return x;
  const Shape& s = x.global_shape();
  int64_t n = 1;
  for (size_t i = 1; i + 1 < s.size(); ++i) n *= s[i];
  return reshape(x, {s[0], n, s.back()});
}

// A per-point buffer (1, N, E) laid out like the tokens `like` (B, N, C): this rank keeps its own points and its
// own samples' copies, with like's placements and extents, so no collective runs (the buffer has no grad).
ShardTensor per_point_buffer(const std::string& kind, const Tensor& buffer, const ShardTensor& like) {
  const ShardSpec& spec = like.spec();
  int64_t offset = 0;
  for (int m = 0; m < like.mesh().ndim(); ++m) {
    const Placement& p = spec.placement(m);
    SHARDRT_CHECK(!p.is_shard(2) && !p.is_partial(), ValueError, kind, ": input 'fx' ", like.str(),
                  " shards its channels or is Partial; shard the batch (dim 0) or the points (dim 1)");
    if (p.is_shard(1)) offset = spec.offset(m);
  }
  const Shape local = like.local().shape();
  Tensor mine = buffer.narrow(1, offset, local[1]).expand({local[0], local[1], buffer.size(2)}).contiguous();
  return from_local(mine, like.mesh(), like.placements(), spec.all_extents());
}

}  // namespace

ShardTensor TransolverShell::embed(const std::map<std::string, ShardTensor>& inputs, Layout& layout) const {
  check_inputs(inputs);
  const ShardTensor& fx_in = inputs.at("fx");
  layout.spatial = fx_in.dim() != 3;
  const ShardTensor fx = as_tokens(fx_in);
  const ShardTensor emb =
      config_.unified_pos ? per_point_buffer(kind_, embedding, fx) : as_tokens(inputs.at("embedding"));
  ShardTensor h = preprocess->forward(cat({emb, fx}, -1));  // embedding first: PhysicsNeMo's column order
  auto t = inputs.find("time");
  if (t != inputs.end()) {
    // The time term is the same for every point of a sample: time_fc once per sample, broadcast over the points.
    ShardTensor te = time_fc2->forward(silu(time_fc0->forward(time_embed->forward(t->second))));
    h = add(h, unsqueeze(te, 1));
  }
  return h;
}

ShardTensor TransolverShell::finish(const ShardTensor& out, const Layout& layout) const {
  if (!layout.spatial) return out;
  Shape s = {out.global_shape()[0]};
  for (int64_t e : *config_.structured_shape) s.push_back(e);
  s.push_back(out.global_shape().back());
  return reshape(out, s);
}

}  // namespace shardrt::models
