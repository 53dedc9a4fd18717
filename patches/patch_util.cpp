#include "patches/patch_util.h"

#include <algorithm>
#include <limits>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "patches/domain_batch.h"
#include "runtime/factories.h"

namespace shardrt::patch {

Communicator& axis_comm(const Mesh& mesh, int axis) { return mesh.axis(mesh.axis_names()[axis]); }

std::vector<int> shard_axes(const ShardSpec& spec) {
  std::vector<int> axes;
  for (int m = 0; m < static_cast<int>(spec.placements().size()); ++m)
    if (spec.placement(m).is_shard()) axes.push_back(m);
  return axes;
}

std::vector<int> param_grad_axes(const ShardSpec& spec) {
  std::vector<int> axes;
  for (int m : shard_axes(spec))
    if (!spec.mesh().is_batch_axis(m)) axes.push_back(m);
  return axes;
}

std::vector<int> axes_sharding(const ShardSpec& spec, const std::vector<int>& dims) {
  std::vector<int> axes;
  for (int m = 0; m < static_cast<int>(spec.placements().size()); ++m) {
    const Placement& p = spec.placement(m);
    if (p.is_shard() && std::find(dims.begin(), dims.end(), p.dim) != dims.end()) axes.push_back(m);
  }
  return axes;
}

std::vector<int> wrap_dims(const char* op, const std::vector<int>& dims, int ndim) {
  std::vector<int> wrapped;
  if (dims.empty())
    for (int d = 0; d < ndim; ++d) wrapped.push_back(d);
  for (int d : dims) {
    const int w = wrap_dim(d, ndim, op);
    SHARDRT_CHECK(std::find(wrapped.begin(), wrapped.end(), w) == wrapped.end(), ShapeError, op, ": dim ", d,
                  " given twice");
    wrapped.push_back(w);
  }
  std::sort(wrapped.begin(), wrapped.end());
  return wrapped;
}

Tensor global_stand_in(const ShardTensor& x) {
  return ops_detail::shape_stand_in(x.global_shape(), x.dtype(), x.local().device());
}

AxisExtents no_extents(const Mesh& mesh) {
  return AxisExtents(static_cast<size_t>(mesh.ndim()));
}

ShardTensor replicated(const Tensor& t, const Mesh& mesh) {
  return ShardTensor(t, ShardSpec(mesh, Placements(static_cast<size_t>(mesh.ndim()), Placement::Replicate()), t.shape(),
                                  no_extents(mesh)));
}

void all_reduce_over(const Mesh& mesh, const std::vector<int>& axes, const Tensor& buf, ReduceOp op,
                     const std::string& label) {
  for (int m : axes) {
    Communicator& comm = axis_comm(mesh, m);
    auto scope = comm.ledger().scope(label);
    comm.all_reduce(buf, op);
  }
}

Tensor local_extremum_keepdim(const Tensor& x, const std::vector<int>& dims, ReduceOp op) {
  const bool is_max = op == ReduceOp::max;
  Shape kept = x.shape();
  int64_t reduced = 1;
  for (int d : dims) {
    reduced *= kept[d];
    kept[d] = 1;
  }
  if (reduced == 0) {
    const double identity = is_max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return full(kept, identity, {x.dtype(), x.device()});
  }
  return is_max ? amax(x.detach(), dims, true) : amin(x.detach(), dims, true);
}

// ---- reduce_grads_over ----------------------------------------------------------------------------------------

std::vector<Tensor> all_reduce_packed(const Mesh& mesh, const std::vector<int>& axes, const std::vector<Tensor>& ts,
                                      const std::string& label) {
  if (ts.empty()) return {};
  // At least f32 on the wire and in the sum: a bf16/f16 partial grad summed over P ranks in 16 bits loses the
  // small contributions.
  DType wide = DType::f32;
  int64_t total = 0;
  for (const Tensor& t : ts) {
    if (t.dtype() == DType::f64) wide = DType::f64;
    total += t.numel();
  }
  Tensor packed = Tensor::empty({total}, wide, ts.front().device());
  int64_t at = 0;
  for (const Tensor& t : ts) {
    packed.narrow(0, at, t.numel()).view(t.shape()).copy_(t);
    at += t.numel();
  }
  all_reduce_over(mesh, axes, packed, ReduceOp::sum, label);
  std::vector<Tensor> out;
  at = 0;
  for (const Tensor& t : ts) {
    out.push_back(packed.narrow(0, at, t.numel()).view(t.shape()).to(t.dtype()));
    at += t.numel();
  }
  return out;
}

namespace {

struct ReduceGradsCtx {
  Mesh mesh;
  std::vector<int> axes;
  std::string label;  // "<op>.backward"
  double share = 1;
};

// Forward is the identity; backward: the packed sum of the grads, times the share.
std::vector<Tensor> reduce_grads_backward(ReduceGradsCtx& ctx, const std::vector<Tensor>& grads) {
  std::vector<Tensor> sums = all_reduce_packed(ctx.mesh, ctx.axes, grads, ctx.label);
  if (ctx.share != 1)
    for (Tensor& g : sums) g = mul_scalar(g, ctx.share);
  return sums;
}

// The number of ranks over the batch axes where `spec` is sharded (see reduce_param_grads).
double batch_share(const ShardSpec& spec) {
  double ranks = 1;
  for (int m = 0; m < spec.mesh().ndim(); ++m)
    if (spec.mesh().is_batch_axis(m) && spec.placement(m).is_shard()) ranks *= spec.mesh().shape()[m];
  return ranks;
}

}  // namespace

std::vector<Tensor> reduce_param_grads(const char* op, const ShardSpec& x, const std::vector<Tensor>& params) {
  if (!domain_param_grad_sums_deferred()) return reduce_grads_over(op, x.mesh(), param_grad_axes(x), params, batch_share(x));
  // Deferred (DeferDomainParamGradSums): the optimizer sums every parameter grad over every domain axis, once, so
  // each contribution must be partial there. Where x is sharded it is (this rank's shard); where x is replicated
  // over a domain axis the contribution is whole on each of its ranks, so it enters as 1/size of itself and the
  // optimizer's sum makes it whole again.
  double share = batch_share(x);
  const std::vector<int> summed = param_grad_axes(x);
  for (int m = 0; m < x.mesh().ndim(); ++m)
    if (!x.mesh().is_batch_axis(m) && std::find(summed.begin(), summed.end(), m) == summed.end())
      share /= static_cast<double>(x.mesh().shape()[m]);
  return reduce_grads_over(op, x.mesh(), {}, params, share);
}

std::vector<Tensor> reduce_grads_over(const char* op, const Mesh& mesh, const std::vector<int>& axes,
                                      const std::vector<Tensor>& operands, double share) {
  std::vector<size_t> reduced;  // indices of the operands whose grads get reduced
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < operands.size(); ++i)
    if (operands[i].defined() && requires_grad(operands[i])) {
      reduced.push_back(i);
      inputs.push_back(operands[i]);
    }
  if ((axes.empty() && share == 1) || inputs.empty()) return operands;
  const std::string label = std::string(op) + ".backward";
  const std::string node_name = std::string(op) + ".reduce_grads";
  std::vector<Tensor> outs =
      record(node_name.c_str(), inputs, inputs, ReduceGradsCtx{mesh, axes, label, share}, reduce_grads_backward);
  std::vector<Tensor> result = operands;
  for (size_t k = 0; k < reduced.size(); ++k) result[reduced[k]] = outs[k];
  return result;
}

}  // namespace shardrt::patch
