#include "models/flare_attention.h"

#include "autograd/tape.h"
#include "models/init.h"
#include "patches/errors.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt::models {

FlareAttention::FlareAttention(int64_t dim, int64_t heads_, int64_t dim_head_, int64_t s, DType dtype)
    : heads(heads_), dim_head(dim_head_), n_global_queries(s), in_project_x(dim, heads_ * dim_head_, true, dtype),
      self_k(dim_head_, dim_head_, true, dtype), self_v(dim_head_, dim_head_, true, dtype),
      out_linear(heads_ * dim_head_, dim, true, dtype) {
  q_global = zeros({1, heads, n_global_queries, dim_head}, {dtype});
  register_parameter("q_global", &q_global);  // own parameter: first in Attn's state_dict
  register_module("in_project_x", &in_project_x);
  register_module("self_k", &self_k);
  register_module("self_v", &self_v);
  register_module("out_linear", &out_linear);
}

void FlareAttention::init(Generator& gen) {
  {
    NoGradGuard no_grad;
    q_global.copy_(normal_init(q_global.shape(), 1.0, q_global.dtype(), gen));
  }
  for (Linear* l : {&in_project_x, &self_k, &self_v, &out_linear}) l->init_trunc_normal(gen);
}

ShardTensor global_queries_like(const Tensor& q_global, const ShardTensor& k) {
  const ShardSpec& spec = k.spec();
  Placements placements(k.mesh().ndim(), Placement::Replicate());
  AxisExtents extents(k.mesh().ndim());
  Shape local = {k.local().size(0), q_global.size(1), q_global.size(2), q_global.size(3)};
  for (int m = 0; m < k.mesh().ndim(); ++m) {
    const Placement& p = spec.placement(m);
    if (p.is_shard(0) || p.is_shard(1)) {
      placements[m] = p;
      extents[m] = spec.extents(m);
      local[p.dim] = k.local().size(p.dim);
    }
  }
  SHARDRT_CHECK(local[1] == q_global.size(1), MissingShardPatch, "FLARE attention: K ", k.str(),
                " shards the heads; shard the batch or the points");
  // q_global enters as a plain-Tensor operand of a broadcast add onto zeros laid out like K's batch: the
  // elementwise patch's parameter rule then gives its grad the batch-axis share every other weight's grad gets
  // (so reduce_batch_grads' average is right), and, G being replicated over the domain, no collective.
  Tensor base = zeros(local, {k.dtype(), k.device()});
  const ShardTensor zero = from_local(base, k.mesh(), placements, extents);
  return add(zero, q_global.dtype() == k.dtype() ? q_global : to_dtype(q_global, k.dtype()));
}

ShardTensor FlareAttention::forward(const ShardTensor& x) const {
  const Shape& s = x.global_shape();
  SHARDRT_CHECK(s.size() == 3 && s[2] == in_project_x.in_features, ShapeError, "FLARE attention: x is ",
                shape_str(s), "; expected (B, N, ", in_project_x.in_features, ")");
  const int64_t b = s[0], n = s[1];
  // (B, N, H*D) -> (B, H, N, D): channel h*D + d is head h, feature d.
  const ShardTensor xm = permute(reshape(in_project_x.forward(x), {b, n, heads, dim_head}), {0, 2, 1, 3});
  const ShardTensor k = self_k.forward(xm), v = self_v.forward(xm);
  const ShardTensor g = global_queries_like(q_global, k);
  const ShardTensor z = scaled_dot_product_attention(g, k, v, 1.0).out;  // (B, H, S, D), tokens -> latents
  const ShardTensor y = scaled_dot_product_attention(k, g, z, 1.0).out;  // (B, H, N, D), latents -> tokens
  return out_linear.forward(reshape(permute(y, {0, 2, 1, 3}), {b, n, heads * dim_head}));
}

}  // namespace shardrt::models
