#include "models/vit_blocks.h"

#include <cmath>

#include "autograd/tape.h"
#include "models/init.h"
#include "runtime/errors.h"

namespace shardrt::models {

namespace {

Shape patch_conv_shape(int64_t in, int64_t out, int64_t patch, int d) {
  Shape s = {out, in};
  for (int i = 0; i < d; ++i) s.push_back(patch);
  return s;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

}  // namespace

PatchConv::PatchConv(int64_t in_channels, int64_t out_channels, int64_t patch_, int d, DType dtype)
    : patch(patch_), spatial_dims(d) {
  weight = zeros(patch_conv_shape(in_channels, out_channels, patch, d), {dtype});
  bias = zeros({out_channels}, {dtype});
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

ShardTensor PatchConv::forward(const ShardTensor& x) const {
  const std::vector<int64_t> stride(static_cast<size_t>(spatial_dims), patch);
  const std::vector<int64_t> padding(static_cast<size_t>(spatial_dims), 0);
  return conv(x, weight, bias, stride, padding);
}

void PatchConv::init_torch_default(Generator& gen) {
  NoGradGuard no_grad;
  const int64_t fan_in = weight.numel() / weight.size(0);
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  weight.copy_(uniform_init(weight.shape(), bound, weight.dtype(), gen));
  bias.copy_(uniform_init(bias.shape(), bound, bias.dtype(), gen));
}

PatchEmbedding::PatchEmbedding(const std::vector<int64_t>& img, int64_t p, int64_t in_channels, int64_t e,
                               DType dtype)
    : img_size(img),
      patch_size(p),
      embed_dim(e),
      num_patches(0),
      conv(in_channels, e, p, static_cast<int>(img.size()), dtype),
      norm(e, dtype) {
  std::vector<int64_t> grid;
  for (int64_t s : img_size) grid.push_back(s / patch_size);
  num_patches = product(grid);
  register_module("conv", &conv);
  register_module("norm", &norm);
}

ShardTensor PatchEmbedding::forward(const ShardTensor& x) const {
  const int d = static_cast<int>(img_size.size());
  ShardTensor y = conv.forward(x);  // (B, E, H', W'[, D'])
  // Channels last, then the patch grid flattened row-major (h outermost): a rank holding a range of patch rows
  // holds the contiguous token range of those rows, so the sharded rows become sharded tokens with no copy
  // between ranks (the reshape patch scales the extents by W'[·D']).
  std::vector<int> channels_last = {0};
  for (int i = 0; i < d; ++i) channels_last.push_back(2 + i);
  channels_last.push_back(1);
  y = permute(y, channels_last);
  const Shape& g = y.global_shape();
  y = reshape(y, {g[0], num_patches, embed_dim});
  return relu(norm.forward(y));
}

MultiHeadAttention::MultiHeadAttention(int64_t dim, int64_t heads, bool qkv_bias, DType dtype)
    : num_heads(heads), head_dim(heads > 0 ? dim / heads : 0), qkv(dim, 3 * dim, qkv_bias, dtype),
      proj(dim, dim, true, dtype) {
  SHARDRT_CHECK(heads > 0 && dim % heads == 0, ValueError, "vit: embed_dim ", dim,
                " must be a positive multiple of num_heads ", heads);
  register_module("qkv", &qkv);
  register_module("proj", &proj);
}

ShardTensor MultiHeadAttention::forward(const ShardTensor& x) const {
  const int64_t b = x.global_shape()[0], n = x.global_shape()[1], e = x.global_shape()[2];
  // Channel c of qkv is t·E + head·hd + j with t ∈ {q, k, v} outermost, as the example's reshape reads it.
  ShardTensor t = reshape(qkv.forward(x), {b, n, 3, num_heads, head_dim});
  t = permute(t, {2, 0, 3, 1, 4});  // (3, B, heads, N, hd): the token dim stays sharded where it moves
  const ShardTensor q = select(t, 0, 0), k = select(t, 0, 1), v = select(t, 0, 2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  ShardTensor o = scaled_dot_product_attention(q, k, v, scale).out;  // (B, heads, N, hd)
  o = reshape(transpose(o, 1, 2), {b, n, e});
  return proj.forward(o);
}

void MultiHeadAttention::init_torch_default(Generator& gen) {
  qkv.init_torch_default(gen);
  proj.init_torch_default(gen);
}

MLP::MLP(int64_t in, int64_t hidden, int64_t out, DType dtype)
    : fc1(in, hidden, true, dtype), fc2(hidden, out, true, dtype) {
  register_module("fc1", &fc1);
  register_module("fc2", &fc2);
}

void MLP::init_torch_default(Generator& gen) {
  fc1.init_torch_default(gen);
  fc2.init_torch_default(gen);
}

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads, double mlp_ratio, bool qkv_bias, DType dtype)
    : norm1(dim, dtype),
      attn(dim, heads, qkv_bias, dtype),
      norm2(dim, dtype),
      // Python's int() truncates toward zero.
      mlp(dim, static_cast<int64_t>(static_cast<double>(dim) * mlp_ratio), dim, dtype) {
  register_module("norm1", &norm1);
  register_module("attn", &attn);
  register_module("norm2", &norm2);
  register_module("mlp", &mlp);
}

ShardTensor TransformerBlock::forward(const ShardTensor& x) const {
  auto hooks = forward_scope();  // e.g. ZeRO-3's per-block gather (models/module.h)
  ShardTensor h = add(x, attn.forward(norm1.forward(x)));
  return add(h, mlp.forward(norm2.forward(h)));
}

void TransformerBlock::init_torch_default(Generator& gen) {
  attn.init_torch_default(gen);
  mlp.init_torch_default(gen);
}

}  // namespace shardrt::models
