// Counter-based noise for sharded tensors: this rank's window of the uniform draw rand(global shape) that a
// Generator(seed) at stream position `offset` would make (runtime/philox.h: element i of a draw is a pure function
// of (seed, offset, i), with i the GLOBAL row-major index). The noise of an element therefore does not depend on
// the mesh or the decomposition, so a sharded run draws exactly the serial run's noise, and each rank computes only
// its own O(local) values. f64 draws 53-bit uniforms, every other dtype f32's 24-bit ones (rounded to the dtype),
// as rand() does. Placed like `like` (Shard or Replicate axes; Partial is a ValueError). No grad.
#pragma once
#include <cstdint>

#include "patches/shard_tensor.h"

namespace shardrt::models {

Tensor uniform_window(const ShardTensor& like, uint64_t seed, uint64_t offset);

}  // namespace shardrt::models
