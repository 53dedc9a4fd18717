// PhysicsNeMo's HybridViT (the ShardTensor ViT example; models-spec §1), registered as "vit".
//
// Config: HybridViT.__init__'s arguments and defaults — img_size [256, 256] (2 entries: 2-D, 3: 3-D), patch_size 8,
// in_channels 3, num_classes 1000 (0: no head, the output is the pooled (B, E) features), embed_dim 768,
// num_heads 6, depth 16, mlp_ratio 4.0, qkv_bias true. Keys: pos_embed, patch_embed.{conv,norm}.*,
// stages.{i}.{norm1,attn.qkv,attn.proj,norm2,mlp.fc1,mlp.fc2}.*, head.*. Init: torch defaults, pos_embed zeros.
//
// Domain parallelism (§1.8): x (B, C, H, W[, D]) with the batch sharded over a batch axis and the image rows H over
// a domain axis, every rank's rows a whole number of patch rows (input_extents gives such a split). The patch conv
// is then local; its rows of patches are a contiguous token range, so the tokens (B, N, E) are sharded on N with
// no data moving. Per token and local: norms, linears, GELU, residuals. pos_embed is sliced to the tokens'
// extents (its grad all-gathered, so it is complete); attention runs as ring attention over the token shards; the
// mean over tokens is one all-reduce of (B, E); the head runs on the replicated features.
#pragma once
#include <memory>
#include <vector>

#include "models/model.h"
#include "models/vit_blocks.h"

namespace shardrt::models {

struct ViTConfig {
  std::vector<int64_t> img_size = {256, 256};
  int64_t patch_size = 8, in_channels = 3, num_classes = 1000, embed_dim = 768, num_heads = 6, depth = 16;
  double mlp_ratio = 4.0;
  bool qkv_bias = true;

  // From PhysicsNeMo's constructor arguments; unknown keys and invalid values are a ValueError naming them.
  static ViTConfig from_json(const Json& config);
};

class HybridViT : public Model {
 public:
  HybridViT(const ViTConfig& config, const ModelOptions& options = {});

  std::string kind() const override { return "vit"; }
  std::vector<ModelInput> inputs() const override;
  // Batch dim over the first batch axis, image rows (dim 2) over the first domain axis.
  Placements input_placements(const std::string& name, const Shape& global_shape, const Mesh& mesh) const override;
  // Whole patch rows per rank: split_extents of the patch rows, times the patch.
  AxisExtents input_extents(const std::string& name, const Shape& global_shape, const Mesh& mesh) const override;
  std::vector<ShardTensor> forward(const std::map<std::string, ShardTensor>& inputs) override;

  // The pooled features (B, E), replicated over the domain axes.
  ShardTensor forward_features(const ShardTensor& x) const;

  ViTConfig config;
  Tensor pos_embed;  // (1, Np, E)
  PatchEmbedding patch_embed;
  std::vector<std::unique_ptr<TransformerBlock>> stages;
  std::unique_ptr<Linear> head;  // null when num_classes == 0

 private:
  void check_input(const ShardTensor& x) const;
  ShardTensor pos_embed_like(const ShardTensor& tokens) const;
};

std::unique_ptr<Model> build_vit(const Json& config, const ModelOptions& options);

}  // namespace shardrt::models
