#include "patches/domain_batch.h"

#include <algorithm>

#include "autograd/ops.h"
#include "autograd/tape.h"
#include "patches/patch_util.h"
#include "runtime/errors.h"

namespace shardrt {

void check_one_sample_per_domain_group(const char* op, const ShardTensor& x, int batch_dim) {
  const int d = wrap_dim(batch_dim, x.dim(), op);
  const ShardSpec& s = x.spec();
  const Mesh& mesh = x.mesh();
  bool domain_sharded = false;
  for (int m : patch::shard_axes(s)) domain_sharded = domain_sharded || !mesh.is_batch_axis(m);
  if (!domain_sharded) return;
  const int a = s.axis_sharding(d);
  SHARDRT_CHECK(a < 0 || mesh.is_batch_axis(a), ShapeError, op, ": ", x.str(), " shards its batch dim ", d,
                " over the domain axis '", mesh.axis_names()[a],
                "'; split the batch over a batch (ddp) axis and one sample over the domain axes");
  // Samples per domain group: the global batch, or the largest extent of the batch axis sharding it.
  int64_t per_group = a < 0 ? x.global_shape()[d] : 0;
  if (a >= 0)
    for (int64_t e : s.extents(a)) per_group = std::max(per_group, e);
  SHARDRT_CHECK(per_group <= 1, ShapeError, op, ": ", x.str(), " holds up to ", per_group, " samples along dim ", d,
                " inside one domain group; domain-parallel inputs carry one sample per domain group (split the batch "
                "over the ddp axis: Shard(",
                d, ") there with one sample per rank)");
}

namespace {
thread_local int t_deferred_domain_sums = 0;  // open DeferDomainParamGradSums scopes on this thread
}  // namespace

DeferDomainParamGradSums::DeferDomainParamGradSums() { ++t_deferred_domain_sums; }
DeferDomainParamGradSums::~DeferDomainParamGradSums() { --t_deferred_domain_sums; }
bool domain_param_grad_sums_deferred() { return t_deferred_domain_sums > 0; }

void reduce_batch_grads(const Mesh& mesh, const std::vector<Tensor>& params) {
  std::vector<int> axes;
  double ranks = 1;
  for (int m = 0; m < mesh.ndim(); ++m)
    if (mesh.is_batch_axis(m) && mesh.shape()[m] > 1) axes.push_back(m), ranks *= mesh.shape()[m];
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && grad_of(p).defined()) grads.push_back(grad_of(p));
  if (axes.empty() || grads.empty()) return;
  const std::vector<Tensor> sums = patch::all_reduce_packed(mesh, axes, grads, "reduce_batch_grads");
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i].copy_(mul_scalar(sums[i], 1 / ranks));
}

}  // namespace shardrt
