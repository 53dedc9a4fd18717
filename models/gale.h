// GALE and GALE_FA attention (physicsnemo/nn/module/gale.py; models-spec §4.3, §4.4), for any number of input
// streams (each its own points, its own split) and an optional context (B, H, S, Dctx).
//
// GALE, per stream on a (B, N, C):
//   Xm = in_project_x(a), Fm = in_project_fx(a) (B, N, H, D) (Fm = Xm with plus; a 3x3 conv on a structured grid)
//   w, T = slices(in_project_slice(Xm), Fm)                        (§2.3)
//   SA   = softmax(q kᵀ / sqrt(D)) v, [q|k|v] = qkv_project(T)      (t outer: q = [0, D), k = [D, 2D), v = [2D, 3D))
//   CA   = softmax(cross_q(T) cross_k(ctx)ᵀ / sqrt(D)) cross_v(ctx)
//   M    = σ(state_mixing) SA + (1 - σ) CA  |  GELU(concat_project.0([SA, CA]))  |  SA without context
//   out  = out_linear(Σ_s w M as (B, N, H*D))
// GALE_FA, per stream: Xm (B, H, N, D); SA = FLARE's two passes (q_global, self_k, self_v; scale 1);
//   CA = softmax(cross_q(Xm) cross_k(ctx)ᵀ) cross_v(ctx) per token (scale 1); the same mixing, per token.
//
// Domain parallelism with the points sharded (§4.5). GALE: the slice sums of ALL streams are resolved with one
// all-reduce (forward), and the self and cross paths both start from those tokens — everything on T is replicated
// over the domain, so qkv_project, cross_q/k/v, state_mixing and concat_project see replicated data and their
// grads are complete without a reduction; Σ_s w M (the matmul patch, w sharded, M replicated) all-reduces dM once
// in backward; the per-point Linears / convs and the temperature reduce their grads once (their patches).
// GALE_FA: FLARE's collectives (models/flare_attention.h), and the cross attention is the attention patch's
// (S, R) path: local forward, one all-reduce of dK|dV backward; state_mixing / concat_project meet per-point data
// here, so their grads are summed over the domain by the elementwise / linear patches, once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/gale_layers.h"
#include "models/gale_slices.h"

namespace shardrt::models {

enum class StateMixing { weighted, concat_project };
StateMixing state_mixing_from_name(const std::string& model, const std::string& name);

struct GaleOptions {
  int64_t dim = 0, heads = 8, dim_head = 64, slice_num = 32, context_dim = 0;
  double dropout = 0.0;
  bool plus = false, concrete_dropout = false;
  StateMixing mixing = StateMixing::weighted;
  std::optional<std::vector<int64_t>> grid;  // GALEStructuredMesh2D / 3D (GALE only)
};

class GaleAttention : public Module {
 public:
  // xs: one (B, N_i, dim) per stream; context (B, H, S_c, Dctx) or undefined.
  virtual std::vector<ShardTensor> forward(const std::vector<ShardTensor>& xs, const ShardTensor& context,
                                           GumbelState& noise) const = 0;
  virtual void init_torch_default(Generator& gen) = 0;

  std::string noise_site;  // its module path ("blocks.0.Attn"); plus mode's draws are "<path>.<stream>"
};

// Keys in PhysicsNeMo's order: temperature, state_mixing (weighted), proj_temperature.{0,2} (plus),
// in_project_slice, qkv_project, out_linear, out_dropout (concrete), in_project_x, in_project_fx (not plus),
// cross_q, cross_k, cross_v (always, [D, 0] without context), concat_project.0.
class Gale : public GaleAttention {
 public:
  explicit Gale(const GaleOptions& o, DType dtype);
  std::vector<ShardTensor> forward(const std::vector<ShardTensor>& xs, const ShardTensor& context,
                                   GumbelState& noise) const override;
  void init_torch_default(Generator& gen) override;

  GaleOptions opt;
  Tensor temperature, state_mixing;
  std::unique_ptr<Linear> proj_temperature0, proj_temperature2;
  Linear in_project_slice, qkv_project, out_linear;
  std::unique_ptr<ConcreteDropout> out_dropout;
  TokenProjection in_project_x;
  std::unique_ptr<TokenProjection> in_project_fx;
  Linear cross_q, cross_k, cross_v;
  std::unique_ptr<Linear> concat_project0;
};

// Keys: q_global, state_mixing (weighted, with context), in_project_x, self_k, self_v, cross_q/k/v and
// concat_project.0 (with context only), out_linear, out_dropout (concrete).
class GaleFA : public GaleAttention {
 public:
  explicit GaleFA(const GaleOptions& o, DType dtype);
  std::vector<ShardTensor> forward(const std::vector<ShardTensor>& xs, const ShardTensor& context,
                                   GumbelState& noise) const override;
  void init_torch_default(Generator& gen) override;

  GaleOptions opt;
  Tensor q_global, state_mixing;
  Linear in_project_x, self_k, self_v;
  std::unique_ptr<Linear> cross_q, cross_k, cross_v, concat_project0;
  Linear out_linear;
  std::unique_ptr<ConcreteDropout> out_dropout;
};

// The mixing of self and cross outputs (the same in both attentions).
ShardTensor mix_self_and_cross(StateMixing mode, const ShardTensor& sa, const ShardTensor& ca,
                               const Tensor& state_mixing, const Linear* concat_project0);

}  // namespace shardrt::models
