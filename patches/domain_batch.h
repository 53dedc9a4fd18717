// Domain parallelism splits one sample over the ranks of a domain group; batches scale over the ddp axis.
// A batch larger than one inside a domain group is a mistake (usually a data loader that did not split the
// batch over ddp), so models check their inputs with this.
#pragma once
#include "patches/shard_tensor.h"

namespace shardrt {

// Throws ShapeError naming `op` unless the global extent of `batch_dim` is 1 whenever `x` is sharded on some
// mesh axis. Global shapes are the same on every rank, so every rank throws together without communicating.
void check_one_sample_per_domain_group(const char* op, const ShardTensor& x, int batch_dim = 0);

}  // namespace shardrt
