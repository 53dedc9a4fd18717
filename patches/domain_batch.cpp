#include "patches/domain_batch.h"

#include "runtime/errors.h"

namespace shardrt {

void check_one_sample_per_domain_group(const char* op, const ShardTensor& x, int batch_dim) {
  int d = wrap_dim(batch_dim, x.dim(), op);
  SHARDRT_CHECK(!x.spec().any_shard() || x.global_shape()[d] == 1, ShapeError, op, ": ", x.str(),
                " holds a batch of ", x.global_shape()[d], " along dim ", d,
                " inside one domain group; domain-parallel inputs carry one sample per domain group (split the batch "
                "over the ddp axis)");
}

}  // namespace shardrt
