// Element copy with dtype conversion between any two tensors of the same shape, on any devices.
// This is the single place that moves elements between layouts, dtypes and devices.
#pragma once
#include "runtime/tensor.h"

namespace shardrt {

// dst and src must have equal shapes; dst may be any strided view (no overlapping writes assumed).
void copy_elements(const Tensor& dst, const Tensor& src);

}  // namespace shardrt
