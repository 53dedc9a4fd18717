// Sharded ops: overloads of the local ops in autograd/ops.h for ShardTensor inputs, so model code is one code
// path for 1 rank and for N ranks — the placements of the inputs decide what runs. Each op family lives in
// patches/<family>.cpp with the header comment of DESIGN.md §2 (accepted placements, output placements and
// extents, forward/backward collectives, saved bytes per rank).
//
// Parameters are plain replicated Tensors. Where one meets a sharded activation its grad is a partial sum over
// the sharded axes, which the patch's backward all-reduces (sum, in >= fp32) over exactly those axes, once; a
// parameter used only on replicated data is not reduced.
#pragma once
#include <vector>

#include "autograd/ops.h"
#include "patches/shard_tensor.h"

namespace shardrt {

// ---- elementwise (patches/elementwise.cpp) ------------------------------------------------------------------
// Same placements on both sides, or one side Replicate on an axis where the other is sharded along a dim that the
// replicated operand broadcasts over (size 1 or missing). A plain Tensor operand is a replicated operand.
ShardTensor add(const ShardTensor& a, const ShardTensor& b);
ShardTensor sub(const ShardTensor& a, const ShardTensor& b);
ShardTensor mul(const ShardTensor& a, const ShardTensor& b);
ShardTensor div(const ShardTensor& a, const ShardTensor& b);
ShardTensor add(const ShardTensor& a, const Tensor& b);
ShardTensor mul(const ShardTensor& a, const Tensor& b);
ShardTensor add_scalar(const ShardTensor& x, double s);
ShardTensor mul_scalar(const ShardTensor& x, double s);
ShardTensor neg(const ShardTensor& x);
ShardTensor exp(const ShardTensor& x);
ShardTensor tanh(const ShardTensor& x);
ShardTensor relu(const ShardTensor& x);
ShardTensor gelu(const ShardTensor& x, GeluApprox approx = GeluApprox::none);
ShardTensor silu(const ShardTensor& x);
ShardTensor sigmoid(const ShardTensor& x);

// ---- linear and layernorm (patches/linear.cpp, patches/layernorm.cpp) ---------------------------------------
// x sharded on any dim but the last (feature) dim, or replicated; no forward collective. Weight/bias grads are
// all-reduced over the axes where x is sharded.
ShardTensor linear(const ShardTensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// Over unsharded trailing dims.
ShardTensor layer_norm(const ShardTensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                       const Tensor& bias = Tensor(), double eps = 1e-5);

// ---- reductions and softmax (patches/reduce.cpp, patches/softmax.cpp) ---------------------------------------
// Over sharded dims: sum gives Partial on those axes; mean divides by the GLOBAL count (exact on uneven shards)
// and gives Partial; amax all-reduces (max) and gives Replicate. Over unsharded dims: local.
ShardTensor sum(const ShardTensor& x, const std::vector<int>& dims, bool keepdim = false);
ShardTensor mean(const ShardTensor& x, const std::vector<int>& dims, bool keepdim = false);
ShardTensor amax(const ShardTensor& x, const std::vector<int>& dims, bool keepdim = false);
// Over an unsharded dim: local. Over the sharded dim: distributed max and sum (two all-reduces forward, one
// backward).
ShardTensor softmax(const ShardTensor& x, int dim);
ShardTensor log_softmax(const ShardTensor& x, int dim);

// ---- views on unsharded dims (patches/views.cpp) -------------------------------------------------------------
// Extents are tracked: a sharded dim keeps its per-rank extents wherever it moves.
ShardTensor reshape(const ShardTensor& x, const Shape& global_shape);  // sharded dim must be kept intact
ShardTensor view(const ShardTensor& x, const Shape& global_shape);     // reshape without a copy
ShardTensor permute(const ShardTensor& x, const std::vector<int>& dims);
ShardTensor transpose(const ShardTensor& x, int d0, int d1);
ShardTensor unsqueeze(const ShardTensor& x, int dim);
ShardTensor squeeze(const ShardTensor& x, int dim);
ShardTensor select(const ShardTensor& x, int dim, int64_t index);  // an unsharded dim
ShardTensor cat(const std::vector<ShardTensor>& xs, int dim);       // along an unsharded dim, same specs otherwise

// ---- losses over sharded data (patches/loss.cpp) -------------------------------------------------------------
// Scalar, Replicate on every axis: one all-reduce of the partial sums in forward, none in backward.
ShardTensor mse_loss(const ShardTensor& pred, const ShardTensor& target);
ShardTensor relative_l2_loss(const ShardTensor& pred, const ShardTensor& target);

}  // namespace shardrt
