#include "patches/patch_util.h"

#include <algorithm>
#include <limits>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "runtime/factories.h"

namespace shardrt::patch {

Communicator& axis_comm(const Mesh& mesh, int axis) { return mesh.axis(mesh.axis_names()[axis]); }

std::vector<int> shard_axes(const ShardSpec& spec) {
  std::vector<int> axes;
  for (int m = 0; m < static_cast<int>(spec.placements().size()); ++m)
    if (spec.placement(m).is_shard()) axes.push_back(m);
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

namespace {

struct ReduceGradsCtx {
  Mesh mesh;
  std::vector<int> axes;
  std::string label;  // "<op>.backward"
};

// Forward is the identity; backward: pack, all-reduce once per axis, unpack.
std::vector<Tensor> reduce_grads_backward(ReduceGradsCtx& ctx, const std::vector<Tensor>& grads) {
  // At least f32 on the wire and in the sum: a bf16/f16 partial grad summed over P ranks in 16 bits loses the
  // small contributions.
  DType wide = DType::f32;
  int64_t total = 0;
  for (const Tensor& g : grads) {
    if (g.dtype() == DType::f64) wide = DType::f64;
    total += g.numel();
  }
  Tensor packed = Tensor::empty({total}, wide, grads.front().device());
  int64_t at = 0;
  for (const Tensor& g : grads) {
    packed.narrow(0, at, g.numel()).view(g.shape()).copy_(g);
    at += g.numel();
  }
  all_reduce_over(ctx.mesh, ctx.axes, packed, ReduceOp::sum, ctx.label);
  std::vector<Tensor> out;
  at = 0;
  for (const Tensor& g : grads) {
    out.push_back(packed.narrow(0, at, g.numel()).view(g.shape()).to(g.dtype()));
    at += g.numel();
  }
  return out;
}

}  // namespace

std::vector<Tensor> reduce_grads_over(const char* op, const Mesh& mesh, const std::vector<int>& axes,
                                      const std::vector<Tensor>& operands) {
  std::vector<size_t> reduced;  // indices of the operands whose grads get reduced
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < operands.size(); ++i)
    if (operands[i].defined() && requires_grad(operands[i])) {
      reduced.push_back(i);
      inputs.push_back(operands[i]);
    }
  if (axes.empty() || inputs.empty()) return operands;
  const std::string label = std::string(op) + ".backward";
  const std::string node_name = std::string(op) + ".reduce_grads";
  std::vector<Tensor> outs = record_collective(node_name.c_str(), inputs, inputs, true,
                                               ReduceGradsCtx{mesh, axes, label}, reduce_grads_backward);
  std::vector<Tensor> result = operands;
  for (size_t k = 0; k < reduced.size(); ++k) result[reduced[k]] = outs[k];
  return result;
}

}  // namespace shardrt::patch
