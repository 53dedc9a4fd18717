#include "models/vit.h"

#include <sstream>

#include "autograd/tape.h"
#include "runtime/errors.h"

namespace shardrt::models {

namespace {

constexpr const char* kModel = "vit";

void check_x_name(const std::string& name) {
  SHARDRT_CHECK(name == "x", ValueError, kModel, ": unknown input '", name, "'; its only input is x");
}

}  // namespace

ViTConfig ViTConfig::from_json(const Json& json) {
  ConfigReader r(kModel, json);
  ViTConfig c;
  c.img_size = r.integers("img_size", c.img_size);
  c.patch_size = r.integer("patch_size", c.patch_size);
  c.in_channels = r.integer("in_channels", c.in_channels);
  c.num_classes = r.integer("num_classes", c.num_classes);
  c.embed_dim = r.integer("embed_dim", c.embed_dim);
  c.num_heads = r.integer("num_heads", c.num_heads);
  c.depth = r.integer("depth", c.depth);
  c.mlp_ratio = r.number("mlp_ratio", c.mlp_ratio);
  c.qkv_bias = r.boolean("qkv_bias", c.qkv_bias);
  r.finish();
  return c;
}

namespace {

void validate(const ViTConfig& c) {
  SHARDRT_CHECK(c.img_size.size() == 2 || c.img_size.size() == 3, ValueError, kModel,
                " config: img_size must have 2 (2-D) or 3 (3-D) entries, got ", shape_str(c.img_size));
  SHARDRT_CHECK(c.patch_size > 0, ValueError, kModel, " config: patch_size must be positive, got ", c.patch_size);
  for (int64_t s : c.img_size)
    SHARDRT_CHECK(s > 0 && s % c.patch_size == 0, ValueError, kModel, " config: every img_size entry must be a ",
                  "positive multiple of patch_size ", c.patch_size, ", got img_size ", shape_str(c.img_size));
  SHARDRT_CHECK(c.in_channels > 0 && c.embed_dim > 0 && c.num_heads > 0 && c.depth >= 0 && c.num_classes >= 0,
                ValueError, kModel, " config: in_channels ", c.in_channels, ", embed_dim ", c.embed_dim,
                ", num_heads ", c.num_heads, " must be positive, depth ", c.depth, " and num_classes ",
                c.num_classes, " non-negative");
  SHARDRT_CHECK(c.embed_dim % c.num_heads == 0, ValueError, kModel, " config: embed_dim ", c.embed_dim,
                " must be divisible by num_heads ", c.num_heads);
  SHARDRT_CHECK(static_cast<int64_t>(static_cast<double>(c.embed_dim) * c.mlp_ratio) > 0, ValueError, kModel,
                " config: mlp_ratio ", c.mlp_ratio, " gives an MLP hidden width of 0 for embed_dim ", c.embed_dim);
}

const ViTConfig& validated(const ViTConfig& c) {
  validate(c);
  return c;
}

}  // namespace

HybridViT::HybridViT(const ViTConfig& c, const ModelOptions& options)
    : config(validated(c)), patch_embed(c.img_size, c.patch_size, c.in_channels, c.embed_dim, options.dtype) {
  // PhysicsNeMo registers patch_embed before pos_embed, but a module's own parameters come first in state_dict
  // and named_parameters either way, so pos_embed is the first key.
  pos_embed = zeros({1, patch_embed.num_patches, c.embed_dim}, {options.dtype});
  register_parameter("pos_embed", &pos_embed);
  register_module("patch_embed", &patch_embed);
  for (int64_t i = 0; i < c.depth; ++i) {
    stages.push_back(std::make_unique<TransformerBlock>(c.embed_dim, c.num_heads, c.mlp_ratio, c.qkv_bias,
                                                        options.dtype));
    register_module("stages." + std::to_string(i), stages.back().get());
  }
  if (c.num_classes > 0) {
    head = std::make_unique<Linear>(c.embed_dim, c.num_classes, true, options.dtype);
    register_module("head", head.get());
  }
  // torch's defaults, module by module in construction order; LayerNorms stay ones/zeros, pos_embed zeros.
  Generator gen(options.seed);
  patch_embed.conv.init_torch_default(gen);
  for (auto& s : stages) s->init_torch_default(gen);
  if (head) head->init_torch_default(gen);
}

std::vector<ModelInput> HybridViT::inputs() const {
  return {{"x", config.img_size.size() == 2 ? "(B, C_in, H, W)" : "(B, C_in, H, W, D)", true}};
}

Placements HybridViT::input_placements(const std::string& name, const Shape& global_shape, const Mesh& mesh) const {
  check_x_name(name);
  (void)global_shape;
  return samples_and_domain(mesh, 2);  // the image rows
}

AxisExtents HybridViT::input_extents(const std::string& name, const Shape& global_shape, const Mesh& mesh) const {
  check_x_name(name);
  AxisExtents e(static_cast<size_t>(mesh.ndim()));
  const SampleDomainAxes a = sample_domain_axes(mesh);
  if (a.batch >= 0 && !global_shape.empty()) e[a.batch] = split_extents(global_shape[0], mesh.shape()[a.batch]);
  if (a.domain >= 0 && global_shape.size() > 2) {
    const int64_t rows = global_shape[2], p = config.patch_size;
    if (rows % p == 0) {
      e[a.domain] = split_extents(rows / p, mesh.shape()[a.domain]);
      for (int64_t& x : e[a.domain]) x *= p;
    } else {
      e[a.domain] = split_extents(rows, mesh.shape()[a.domain]);  // forward names the mismatch
    }
  }
  return e;
}

void HybridViT::check_input(const ShardTensor& x) const {
  const size_t d = config.img_size.size();
  const Shape& g = x.global_shape();
  const std::string want = inputs()[0].shape;
  SHARDRT_CHECK(g.size() == 2 + d, ShapeError, kModel, ": input x must be ", want, " for img_size ",
                shape_str(config.img_size), ", got global shape ", shape_str(g));
  SHARDRT_CHECK(g[1] == config.in_channels, ShapeError, kModel, ": input x ", shape_str(g), " has ", g[1],
                " channels, the model was built with in_channels ", config.in_channels);
  const std::vector<int64_t> spatial(g.begin() + 2, g.end());
  SHARDRT_CHECK(spatial == config.img_size, ShapeError, kModel, ": input x ", shape_str(g), " has image size ",
                shape_str(spatial), ", the model was built with img_size ", shape_str(config.img_size),
                " (pos_embed holds one entry per patch)");
  const ShardSpec& spec = x.spec();
  for (int m = 0; m < x.mesh().ndim(); ++m) {
    const Placement& p = spec.placement(m);
    SHARDRT_CHECK(!p.is_partial() && (!p.is_shard() || p.dim == 0 || p.dim == 2), ShapeError, kModel,
                  ": input x ", shape_str(g), " placed ", placements_str(spec.placements()),
                  " — only the batch (dim 0) and the image rows (dim 2) may be sharded, and x may not be Partial");
    if (!p.is_shard(2)) continue;
    for (int64_t rows : spec.extents(m))
      SHARDRT_CHECK(rows % config.patch_size == 0, ShapeError, kModel, ": input x ", shape_str(g),
                    " has its image rows split into extents ", shape_str(spec.extents(m)), " over mesh axis '",
                    x.mesh().axis_names()[m], "'; every extent must be a multiple of patch_size ",
                    config.patch_size, " so that no patch straddles two ranks (HybridViT::input_extents gives one)");
  }
}

ShardTensor HybridViT::pos_embed_like(const ShardTensor& tokens) const {
  // pos_embed (1, Np, E) meets tokens (B, Np, E) sharded on N: replicated -> Shard(1) with the tokens' extents is
  // a local slice forward and an all_gather_v backward, so the grad reaching pos_embed is whole on every rank.
  // Over a batch axis it stays Replicate (it broadcasts over B).
  const Mesh& mesh = tokens.mesh();
  const Placements all_r(static_cast<size_t>(mesh.ndim()), Placement::Replicate());
  const ShardTensor whole = from_local(pos_embed, mesh, all_r);
  Placements p = all_r;
  AxisExtents e(static_cast<size_t>(mesh.ndim()));
  for (int m = 0; m < mesh.ndim(); ++m)
    if (tokens.spec().placement(m).is_shard(1)) {
      p[m] = Placement::Shard(1);
      e[m] = tokens.spec().extents(m);
    }
  return redistribute(whole, p, e);
}

ShardTensor HybridViT::forward_features(const ShardTensor& x) const {
  check_input(x);
  ShardTensor t = patch_embed.forward(x);  // (B, Np, E)
  t = add(t, pos_embed_like(t));
  for (const auto& s : stages) t = s->forward(t);
  // The mean over sharded tokens is a pending sum over the domain axes (divided by the GLOBAL count): one
  // all-reduce of (B, E) makes it replicated; its backward sends dfeat/Np to every token without communication.
  ShardTensor f = mean(t, {1});
  Placements done = f.placements();
  for (Placement& p : done)
    if (p.is_partial()) p = Placement::Replicate();
  return redistribute(f, done);
}

std::vector<ShardTensor> HybridViT::forward(const std::map<std::string, ShardTensor>& inputs) {
  check_input_names(*this, inputs);
  const ShardTensor f = forward_features(inputs.at("x"));
  return {head ? head->forward(f) : f};
}

std::unique_ptr<Model> build_vit(const Json& config, const ModelOptions& options) {
  return std::make_unique<HybridViT>(ViTConfig::from_json(config), options);
}

}  // namespace shardrt::models
