// The two kinds of mesh axis (AxisRole in mesh/mesh.h) and what each asks of the caller.
//
// Domain axes split one sample over the ranks of a domain group; batch axes (ddp) split the batch, one sample
// (or a few) per domain group. Who reduces a parameter's grad over which axis, exactly once:
//   domain axes — the patch where the parameter meets the sharded activation sums it, in its backward;
//   batch axes  — nobody in the backward. Each rank's parameter grad is its estimate of the whole batch's grad
//                 (its own samples' contribution times the number of batch ranks; whole already where the data
//                 is replicated over the axis, or the parameter is used by plain local ops), as in DDP;
//                 reduce_batch_grads below (the optimizer's step) averages them.
// Losses over a batch-sharded tensor are means over the GLOBAL batch, so the average is the grad of that mean.
// Activations (ShardTensors) are different: their grads are complete on every axis (shard_tensor.h).
#pragma once
#include <vector>

#include "patches/shard_tensor.h"

namespace shardrt {

// Throws ShapeError naming `op` unless every domain group holds at most one sample of `x` along `batch_dim`:
// when x is sharded over some domain axis, the batch dim must be either of global extent 1, or Shard over batch
// axes only with every rank's extent <= 1 (batch Shard(0) over ddp, tokens over domain: the canonical layout).
// A batch dim sharded over a domain axis is rejected too. Specs are the same on every rank, so every rank
// throws together without communicating.
void check_one_sample_per_domain_group(const char* op, const ShardTensor& x, int batch_dim = 0);

// ---- deferred domain sums of parameter grads ----
// While one of these is alive on a thread, the patches recorded on that thread leave PARAMETER grads partial over
// the domain axes: reduce_param_grads (patches/patch_util.h, the one place every patch's parameter-grad sum goes
// through) skips its domain all_reduce and keeps only the batch share. Whoever opens the scope takes over the
// domain sum, once per parameter, over the whole accumulated grad — the optimizer does it in buckets as the
// grads become ready (Optimizer::defer_domain_grad_sums). The decision is made when an op is recorded (forward),
// so the scope must cover the forward of the step, and every rank of a domain group must open it alike.
// Off by default; scopes nest. A patch whose activation is replicated over a domain axis (a head after a global
// pool) makes a whole contribution there: it enters divided by that axis' size, so the optimizer's sum restores it.
// A parameter used by plain local ops outside any patch would be summed over the domain a second time, so under
// this scope every use of a parameter must go through a patch — true of the bundled models.
class DeferDomainParamGradSums {
 public:
  DeferDomainParamGradSums();
  ~DeferDomainParamGradSums();
  DeferDomainParamGradSums(const DeferDomainParamGradSums&) = delete;
  DeferDomainParamGradSums& operator=(const DeferDomainParamGradSums&) = delete;
};
bool domain_param_grad_sums_deferred();

// Completes parameter grads over the batch axes of `mesh`: each defined grad of `params` is replaced in place by
// its mean over every batch axis of more than one rank (one packed all_reduce per axis, in >= f32, ledger label
// "reduce_batch_grads"). The parameters with a defined grad must be the same, in the same order and shapes, on
// every rank (true after the same backward). Collective over the batch axes; no-op without one.
void reduce_batch_grads(const Mesh& mesh, const std::vector<Tensor>& params);

}  // namespace shardrt
