// Internal helpers shared by the sharded op files (elementwise, linear, norm, reduce, softmax, views, loss, ...):
// which axes shard a tensor, collectives over a set of mesh axes under the op's ledger label, and the recorded
// op that reduces a replicated operand's partial grad.
#pragma once
#include <string>
#include <vector>

#include "mesh/communicator.h"
#include "patches/shard_tensor.h"

namespace shardrt::patch {

// The communicator of mesh axis `axis` (an index into mesh.axis_names()).
Communicator& axis_comm(const Mesh& mesh, int axis);

// Mesh axes (ascending) whose placement is Shard; the axes a replicated operand's grad is partial over.
std::vector<int> shard_axes(const ShardSpec& spec);

// The axes a PARAMETER's grad is summed over by the patch where it meets an activation with this spec: the Shard
// axes of domain role. Along a batch axis the grad stays this rank's own; the optimizer averages it there, once
// (reduce_batch_grads, patches/domain_batch.h). Activations (ShardTensors) are not parameters: their grads are
// complete on every axis (the grad convention of shard_tensor.h), so replicated activations use shard_axes.
std::vector<int> param_grad_axes(const ShardSpec& spec);

// Mesh axes (ascending) whose Shard dim is one of `dims` (wrapped dims of spec's tensor).
std::vector<int> axes_sharding(const ShardSpec& spec, const std::vector<int>& dims);

// `dims` wrapped into [0, ndim) and sorted, duplicates rejected; empty means every dim (the convention of the local
// reductions). ShapeError naming `op` otherwise.
std::vector<int> wrap_dims(const char* op, const std::vector<int>& dims, int ndim);

// A ShardTensor for a plain Tensor operand: Replicate on every axis of `mesh`, the tensor itself as local (so
// its grads reach it directly).
ShardTensor replicated(const Tensor& t, const Mesh& mesh);

// In place: buf = reduction of buf over each axis in `axes`, in order, every call counted in the ledger under
// `label` (e.g. "linear.backward"). The scope is opened per call, on the axis' own ledger, so a label is never
// nested in itself when several axes share one ledger.
void all_reduce_over(const Mesh& mesh, const std::vector<int>& axes, const Tensor& buf, ReduceOp op,
                     const std::string& label);

// The sums of `ts` over each axis in `axes` (one flat buffer of at least f32, one all_reduce per axis under
// `label`), returned in the tensors' own dtypes and shapes. Not recorded.
std::vector<Tensor> all_reduce_packed(const Mesh& mesh, const std::vector<int>& axes, const std::vector<Tensor>& ts,
                                      const std::string& label);

// What every patch does with its parameters (plain replicated Tensors: weights, biases) meeting an activation
// with spec `x`: reduce_grads_over the domain axes of param_grad_axes(x), times the size of every batch axis
// sharding x. The grad of a rank's own samples times the number of batch ranks is its estimate of the whole
// batch's grad (DDP's per-replica grad), so the optimizer's AVERAGE over the batch axes counts every sample
// exactly once — and a grad that is already whole on every rank (replicated data, plain local ops on the
// parameter) averages to itself. No node when nothing is reduced or scaled.
std::vector<Tensor> reduce_param_grads(const char* op, const ShardSpec& x, const std::vector<Tensor>& params);

// Identity on `operands` (replicated tensors: parameters, or a replicated operand of an elementwise op). Its
// backward sums their grads — partial contributions computed from this rank's shard — over `axes`, exactly once:
// all grads packed into ONE flat buffer of at least f32 (16-bit grads are promoted, then cast back), one
// all_reduce per axis under "<op>.backward". Operands that need no grad pass through untouched (nothing is
// reduced for them), and with no operand needing grad, or no axis, nothing is recorded. Whether an operand
// requires grad must be the same on every rank (true of replicated parameters), because every rank must record
// the node to run the backward's collectives.
// Which operand of a two-operand op, if any, came in as a plain Tensor: a parameter, whose grad takes the parameter
// rule (reduce_param_grads) instead of the activation rule (reduce_grads_over every axis the other one shards).
enum class PlainOperand { none, a, b };

// `share` multiplies the reduced grads (reduce_param_grads' batch factor; 1 otherwise).
std::vector<Tensor> reduce_grads_over(const char* op, const Mesh& mesh, const std::vector<int>& axes,
                                      const std::vector<Tensor>& operands, double share = 1);

// Max (op = max) or min (op = min) of x over `dims`, keeping them with size 1; where this rank's part of the
// reduced dims is empty, -inf (max) or +inf (min), the identity of the all-reduce that follows. Not recorded.
Tensor local_extremum_keepdim(const Tensor& x, const std::vector<int>& dims, ReduceOp op);

// A one-element stand-in with x's GLOBAL shape, dtype and device (ops_detail::shape_stand_in), for running a
// local op's argument checks before any plan or collective: the error is then the local op's for the global
// tensor, with the same message on every rank.
Tensor global_stand_in(const ShardTensor& x);

// Per-axis extents of a spec in which no axis shards anything yet (to be filled for Shard axes).
AxisExtents no_extents(const Mesh& mesh);

}  // namespace shardrt::patch
