// CUDA caching allocator: stream-ordered allocation from a per-device memory pool that keeps freed blocks
// for reuse (the CUDA runtime's pool allocator, with its release threshold raised so nothing is returned to
// the driver between steps). Current and peak bytes are counted here like for host memory.
#pragma once
#include "runtime/allocator.h"

namespace shardrt {

Allocator& cuda_caching_allocator(int device);

}  // namespace shardrt
