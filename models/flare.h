// PhysicsNeMo's FLARE (physicsnemo/models/flare/flare.py): the Transolver shell (models/transolver_shell.h) with
// every block a _FLAREBlock. Registry name "flare"; config: FLARE.__init__'s arguments (models-spec §3.1).
//
// A block, on X (B, N, n):  X = X + Attn(ln_1(X));  X = X + Mlp(ln_mlp1.0(X));  the last block returns
// ln_mlp2.1(ln_mlp2.0(X)) (B, N, out_dim), without a residual. Keys: blocks.{i}.ln_1.*, blocks.{i}.Attn.*,
// blocks.{i}.ln_mlp1.0.*, blocks.{i}.ln_mlp1.1.layers.{0,2}.*, and in the last block ln_mlp2.{0,1}.*.
//
// Domain parallelism: with the points over a domain axis the norms, Mlps and residuals are local, the attention's
// collectives are those of models/flare_attention.h, and every weight's grad is summed over the domain once by
// the patch it meets (the Linears', LayerNorms' and the time_fc's too). One code path: a one-rank mesh or all
// inputs replicated runs the plain serial computation.
#pragma once
#include <memory>
#include <vector>

#include "models/flare_attention.h"
#include "models/transolver_shell.h"

namespace shardrt::models {

class FlareBlock : public Module {
 public:
  FlareBlock(int64_t hidden, int64_t heads, int64_t mlp_ratio, int64_t n_global_queries, Activation act,
             bool last_layer, int64_t out_dim, DType dtype);
  ShardTensor forward(const ShardTensor& x) const;
  void init(Generator& gen);

  bool last_layer;
  LayerNorm ln_1;
  FlareAttention Attn;
  LayerNorm ln_mlp1_norm;  // ln_mlp1.0
  Mlp ln_mlp1_mlp;         // ln_mlp1.1
  std::unique_ptr<LayerNorm> ln_mlp2_norm;  // ln_mlp2.0, last block only
  std::unique_ptr<Linear> ln_mlp2_linear;   // ln_mlp2.1
};

class Flare : public TransolverShell {
 public:
  Flare(TransolverConfig config, const ModelOptions& options);
  std::vector<ShardTensor> forward(const std::map<std::string, ShardTensor>& inputs) override;

  std::vector<std::unique_ptr<FlareBlock>> blocks;
};

std::unique_ptr<Model> build_flare(const Json& config, const ModelOptions& options);

}  // namespace shardrt::models
