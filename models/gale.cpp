#include "models/gale.h"

#include <cmath>

#include "autograd/tape.h"
#include "models/flare_attention.h"
#include "models/init.h"
#include "runtime/errors.h"

namespace shardrt::models {

StateMixing state_mixing_from_name(const std::string& model, const std::string& name) {
  if (name == "weighted") return StateMixing::weighted;
  if (name == "concat_project") return StateMixing::concat_project;
  throw ValueError(model + " config: state_mixing_mode '" + name + "' is invalid; expected 'weighted' or "
                   "'concat_project'");
}

ShardTensor mix_self_and_cross(StateMixing mode, const ShardTensor& sa, const ShardTensor& ca,
                               const Tensor& state_mixing, const Linear* concat_project0) {
  if (mode == StateMixing::concat_project) return gelu(concat_project0->forward(cat({sa, ca}, -1)));
  const Tensor g = sigmoid(state_mixing.dtype() == sa.dtype() ? state_mixing : to_dtype(state_mixing, sa.dtype()));
  return add(mul(sa, g), mul(ca, add_scalar(neg(g), 1.0)));
}

// ---- GALE ---------------------------------------------------------------------------------------------------

Gale::Gale(const GaleOptions& o, DType dtype)
    : opt(o), in_project_slice(o.dim_head, o.slice_num, true, dtype),
      qkv_project(o.dim_head, 3 * o.dim_head, false, dtype), out_linear(o.heads * o.dim_head, o.dim, true, dtype),
      in_project_x(o.dim, o.heads * o.dim_head, o.grid, dtype), cross_q(o.dim_head, o.dim_head, true, dtype),
      cross_k(o.context_dim, o.dim_head, true, dtype), cross_v(o.context_dim, o.dim_head, true, dtype) {
  temperature = full({1, 1, o.heads, 1}, 0.5, {dtype});
  register_parameter("temperature", &temperature);
  if (o.mixing == StateMixing::weighted) {
    state_mixing = zeros({}, {dtype});
    register_parameter("state_mixing", &state_mixing);
  }
  if (o.plus) {
    proj_temperature0 = std::make_unique<Linear>(o.dim_head, o.slice_num, true, dtype);
    proj_temperature2 = std::make_unique<Linear>(o.slice_num, 1, true, dtype);
    register_module("proj_temperature.0", proj_temperature0.get());
    register_module("proj_temperature.2", proj_temperature2.get());
  }
  register_module("in_project_slice", &in_project_slice);
  register_module("qkv_project", &qkv_project);
  register_module("out_linear", &out_linear);
  // PhysicsNeMo replaces the Dropout registered right after out_linear, so the key sits here. The structured
  // variants are never given concrete_dropout.
  if (o.concrete_dropout && !o.grid) {
    out_dropout = std::make_unique<ConcreteDropout>(o.dropout, dtype);
    register_module("out_dropout", out_dropout.get());
  }
  register_module("in_project_x", &in_project_x);
  if (!o.plus) {
    in_project_fx = std::make_unique<TokenProjection>(o.dim, o.heads * o.dim_head, o.grid, dtype);
    register_module("in_project_fx", in_project_fx.get());
  }
  // Always registered, even without context (cross_k / cross_v are then [D, 0]: quirk 1 of §4.7).
  register_module("cross_q", &cross_q);
  register_module("cross_k", &cross_k);
  register_module("cross_v", &cross_v);
  if (o.mixing == StateMixing::concat_project) {
    concat_project0 = std::make_unique<Linear>(2 * o.dim_head, o.dim_head, true, dtype);
    register_module("concat_project.0", concat_project0.get());
  }
}

void Gale::init_torch_default(Generator& gen) {
  if (proj_temperature0) proj_temperature0->init_torch_default(gen), proj_temperature2->init_torch_default(gen);
  in_project_slice.init_torch_default(gen);
  {
    NoGradGuard no_grad;  // GALE's slice projection is orthogonal_ (its bias keeps the default uniform)
    in_project_slice.weight.copy_(orthogonal_init(in_project_slice.weight.shape(), in_project_slice.weight.dtype(), gen));
  }
  qkv_project.init_torch_default(gen);
  out_linear.init_torch_default(gen);
  in_project_x.init_torch_default(gen);
  if (in_project_fx) in_project_fx->init_torch_default(gen);
  for (Linear* l : {&cross_q, &cross_k, &cross_v}) l->init_torch_default(gen);
  if (concat_project0) concat_project0->init_torch_default(gen);
}

std::vector<ShardTensor> Gale::forward(const std::vector<ShardTensor>& xs, const ShardTensor& context,
                                       GumbelState& noise) const {
  const int64_t h = opt.heads, d = opt.dim_head;
  std::vector<PendingSlices> pending;
  for (const ShardTensor& a : xs) {
    const Shape& s = a.global_shape();
    SHARDRT_CHECK(s.size() == 3 && s[2] == opt.dim, ShapeError, "GALE: input ", shape_str(s), "; expected (B, N, ",
                  opt.dim, ")");
    const ShardTensor xm = reshape(in_project_x.forward(a), {s[0], s[1], h, d});
    const ShardTensor fm = opt.plus ? xm : reshape(in_project_fx->forward(a), {s[0], s[1], h, d});
    const ShardTensor z = in_project_slice.forward(xm);  // (B, N, H, S), one Linear shared by the heads
    const ShardTensor w = opt.plus
                              ? slice_weights_plus(z, fm, temperature, *proj_temperature0, *proj_temperature2, noise,
                                                 noise_site + "." + std::to_string(pending.size()))
                              : slice_weights(z, temperature);
    pending.push_back(slice_sums(w, fm));
  }
  // Every stream's slice tokens with one all-reduce; self and cross attention both start from them.
  const std::vector<ShardTensor> tokens = resolve_slice_tokens(pending);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  ShardTensor ck, cv;
  if (context.defined()) {
    SHARDRT_CHECK(context.global_shape().size() == 4 && context.global_shape()[3] == opt.context_dim, ShapeError,
                  "GALE: context ", shape_str(context.global_shape()), "; the block was built for Dctx=",
                  opt.context_dim, " (B, H, S, Dctx)");
    ck = cross_k.forward(context), cv = cross_v.forward(context);
  }
  std::vector<ShardTensor> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    const ShardTensor& t = tokens[i];
    const std::vector<ShardTensor> qkv = split(qkv_project.forward(t), {d, d, d}, -1);
    ShardTensor m = scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], scale).out;
    if (context.defined()) {
      const ShardTensor ca = scaled_dot_product_attention(cross_q.forward(t), ck, cv, scale).out;
      m = mix_self_and_cross(opt.mixing, m, ca, state_mixing, concat_project0.get());
    }
    // Back to the points with the raw weights: Y[n, h] = Σ_s w[n, h, s] M[h, s] as (B, H, N, S) x (B, H, S, D).
    const ShardTensor& w = pending[i].weights;
    const Shape& s = xs[i].global_shape();
    const ShardTensor y = matmul(permute(w, {0, 2, 1, 3}), m);
    ShardTensor o = out_linear.forward(reshape(permute(y, {0, 2, 1, 3}), {s[0], s[1], h * d}));
    out.push_back(out_dropout ? out_dropout->forward(o, noise) : o);
  }
  return out;
}

// ---- GALE_FA ------------------------------------------------------------------------------------------------

GaleFA::GaleFA(const GaleOptions& o, DType dtype)
    : opt(o), in_project_x(o.dim, o.heads * o.dim_head, true, dtype), self_k(o.dim_head, o.dim_head, true, dtype),
      self_v(o.dim_head, o.dim_head, true, dtype), out_linear(o.heads * o.dim_head, o.dim, true, dtype) {
  q_global = zeros({1, o.heads, o.slice_num, o.dim_head}, {dtype});
  register_parameter("q_global", &q_global);
  const bool cross = o.context_dim > 0;
  if (cross && o.mixing == StateMixing::weighted) {
    state_mixing = zeros({}, {dtype});
    register_parameter("state_mixing", &state_mixing);
  }
  register_module("in_project_x", &in_project_x);
  register_module("self_k", &self_k);
  register_module("self_v", &self_v);
  if (cross) {
    cross_q = std::make_unique<Linear>(o.dim_head, o.dim_head, true, dtype);
    cross_k = std::make_unique<Linear>(o.context_dim, o.dim_head, true, dtype);
    cross_v = std::make_unique<Linear>(o.context_dim, o.dim_head, true, dtype);
    register_module("cross_q", cross_q.get());
    register_module("cross_k", cross_k.get());
    register_module("cross_v", cross_v.get());
    if (o.mixing == StateMixing::concat_project) {
      concat_project0 = std::make_unique<Linear>(2 * o.dim_head, o.dim_head, true, dtype);
      register_module("concat_project.0", concat_project0.get());
    }
  }
  register_module("out_linear", &out_linear);
  if (o.concrete_dropout) {
    out_dropout = std::make_unique<ConcreteDropout>(o.dropout, dtype);
    register_module("out_dropout", out_dropout.get());
  }
}

void GaleFA::init_torch_default(Generator& gen) {
  {
    NoGradGuard no_grad;
    q_global.copy_(normal_init(q_global.shape(), 1.0, q_global.dtype(), gen));
  }
  for (Linear* l : {&in_project_x, &self_k, &self_v}) l->init_torch_default(gen);
  for (Linear* l : {cross_q.get(), cross_k.get(), cross_v.get(), concat_project0.get()})
    if (l) l->init_torch_default(gen);
  out_linear.init_torch_default(gen);
}

std::vector<ShardTensor> GaleFA::forward(const std::vector<ShardTensor>& xs, const ShardTensor& context,
                                         GumbelState& noise) const {
  (void)noise;  // no slices here: GALE_FA ignores plus
  const int64_t h = opt.heads, d = opt.dim_head;
  const bool cross = context.defined() && cross_q;
  SHARDRT_CHECK(!context.defined() || cross, ValueError, "GALE_FA: a context ", shape_str(context.global_shape()),
                " was given to a block built without context (context_dim=0)");
  ShardTensor ck, cv;
  if (cross) {
    SHARDRT_CHECK(context.global_shape().size() == 4 && context.global_shape()[3] == opt.context_dim, ShapeError,
                  "GALE_FA: context ", shape_str(context.global_shape()), "; the block was built for Dctx=",
                  opt.context_dim, " (B, H, S, Dctx)");
    ck = cross_k->forward(context), cv = cross_v->forward(context);
  }
  std::vector<ShardTensor> out;
  for (const ShardTensor& a : xs) {
    const Shape& s = a.global_shape();
    SHARDRT_CHECK(s.size() == 3 && s[2] == opt.dim, ShapeError, "GALE_FA: input ", shape_str(s),
                  "; expected (B, N, ", opt.dim, ")");
    const ShardTensor xm = permute(reshape(in_project_x.forward(a), {s[0], s[1], h, d}), {0, 2, 1, 3});
    const ShardTensor k = self_k.forward(xm), v = self_v.forward(xm);
    const ShardTensor g = global_queries_like(q_global, k);
    const ShardTensor z = scaled_dot_product_attention(g, k, v, 1.0).out;   // tokens -> latents
    ShardTensor y = scaled_dot_product_attention(k, g, z, 1.0).out;         // latents -> tokens
    if (cross) {
      const ShardTensor ca = scaled_dot_product_attention(cross_q->forward(xm), ck, cv, 1.0).out;
      y = mix_self_and_cross(opt.mixing, y, ca, state_mixing, concat_project0.get());
    }
    ShardTensor o = out_linear.forward(reshape(permute(y, {0, 2, 1, 3}), {s[0], s[1], h * d}));
    out.push_back(out_dropout ? out_dropout->forward(o, noise) : o);
  }
  return out;
}

}  // namespace shardrt::models
