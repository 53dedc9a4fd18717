// The blocks of PhysicsNeMo's HybridViT (examples/minimal/ShardTensorExamples/5_vit_training_loop/model/), with the
// example's class and attribute names so that the state_dict keys are its keys: PatchEmbedding2d/3d (conv, norm),
// MultiHeadAttention (qkv, proj), MLP (fc1, act, fc2), TransformerBlock (norm1, attn, norm2, mlp).
//
// Every forward takes ShardTensors of tokens (B, N, E) — the token axis N sharded over a domain axis, the batch over
// a batch axis — and calls only the sharded ops of patches/ops.h: what is communicated, and where, is decided by
// the placements (models-spec §1.8; docs/models.md "ViT" lists the collectives per block).
#pragma once
#include <cstdint>
#include <vector>

#include "models/layers.h"
#include "models/module.h"
#include "patches/ops.h"
#include "runtime/factories.h"

namespace shardrt::models {

// nn.Conv2d / nn.Conv3d with kernel = stride = patch, padding 0: weight [out, in, p, …], bias [out].
class PatchConv : public Module {
 public:
  PatchConv(int64_t in_channels, int64_t out_channels, int64_t patch, int spatial_dims, DType dtype);
  // x (B, C, *spatial) -> (B, E, *spatial / p): the sharded conv's patchify path (local, no halo), which needs
  // every rank's extent of a sharded spatial dim to be a multiple of the patch (checked by the caller).
  ShardTensor forward(const ShardTensor& x) const;
  // torch's ConvNd default: weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = C_in * p^d.
  void init_torch_default(Generator& gen);

  int64_t patch;
  int spatial_dims;
  Tensor weight, bias;
};

// PatchEmbedding2d / PatchEmbedding3d (one class, the spatial rank from len(img_size)): conv, then the tokens in
// row-major patch order (h outermost), then LayerNorm and ReLU. Output (B, Np, E).
class PatchEmbedding : public Module {
 public:
  PatchEmbedding(const std::vector<int64_t>& img_size, int64_t patch_size, int64_t in_channels, int64_t embed_dim,
                 DType dtype);
  ShardTensor forward(const ShardTensor& x) const;

  std::vector<int64_t> img_size;
  int64_t patch_size, embed_dim, num_patches;
  PatchConv conv;
  LayerNorm norm;
};

// Self-attention: qkv (3E, with or without bias), heads of hd = E / heads, softmax(q kᵀ / sqrt(hd)) v over ALL
// tokens (ring attention when the tokens are sharded), proj (always with bias).
class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t dim, int64_t num_heads, bool qkv_bias, DType dtype);
  ShardTensor forward(const ShardTensor& x) const;
  void init_torch_default(Generator& gen);

  int64_t num_heads, head_dim;
  Linear qkv, proj;
};

// fc1 -> exact GELU -> fc2 (`act` has no parameters, so no key).
class MLP : public Module {
 public:
  MLP(int64_t in_features, int64_t hidden_features, int64_t out_features, DType dtype);
  ShardTensor forward(const ShardTensor& x) const { return fc2.forward(gelu(fc1.forward(x), GeluApprox::none)); }
  void init_torch_default(Generator& gen);

  Linear fc1, fc2;
};

// Pre-norm block: x + attn(norm1(x)), then + mlp(norm2(x)). Hidden width int(dim * mlp_ratio), as Python's int().
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t dim, int64_t num_heads, double mlp_ratio, bool qkv_bias, DType dtype);
  ShardTensor forward(const ShardTensor& x) const;
  void init_torch_default(Generator& gen);

  LayerNorm norm1;
  MultiHeadAttention attn;
  LayerNorm norm2;
  MLP mlp;
};

}  // namespace shardrt::models
