// Philox fills on a CUDA device; element i gets exactly the value random_fill.h gives on the host
// (uniform bit-exact; normal up to the device libm's last-ulp differences in log/cos).
#pragma once
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/random_fill.h"

namespace shardrt {

// dtype is f32 or f64; n contiguous elements.
void philox_fill_cuda(int device, void* dst, DType dtype, int64_t n, philox::Distribution dist, uint64_t seed,
                      uint64_t offset, double a, double b);

}  // namespace shardrt
