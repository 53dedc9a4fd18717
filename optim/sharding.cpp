#include "optim/sharding.h"

#include "runtime/errors.h"

namespace shardrt::optim {

ShardPlan plan_sharding(const Mesh& mesh, ShardingMode mode) {
  ShardPlan p;
  p.mode = mode;
  const bool one_d = mesh.ndim() == 1;
  const bool two_d = mesh.ndim() == 2 && mesh.is_batch_axis(0) && !mesh.is_batch_axis(1);
  SHARDRT_CHECK(one_d || two_d, ValueError, "optimizer: mesh ", mesh.str(),
                " is not supported; use a 1-D mesh or a 2-D batch x domain mesh (Mesh(comm, ddp, domain))");
  if (mesh.is_batch_axis(0)) {
    p.batch_axis = mesh.axis_names()[0];
    p.batch_ranks = mesh.shape()[0];
  }
  if (!mesh.is_batch_axis(mesh.ndim() - 1)) {
    p.domain_ranks = mesh.shape().back();
    p.domain_index = mesh.coords().back();
  }
  const int batch_index = p.batch_axis.empty() ? 0 : mesh.coords()[0];
  p.batch_index = batch_index;
  switch (mode) {
    case ShardingMode::replicated:
      break;
    case ShardingMode::ddp:
    case ShardingMode::zero3:
      p.shards = p.batch_ranks, p.own_shard = batch_index;
      break;
    case ShardingMode::mesh:
      p.shards = mesh.size(), p.own_shard = mesh.rank();
      break;
  }
  return p;
}

}  // namespace shardrt::optim
