// Host loop for copy_elements: strided N-d copy with dtype conversion.
#pragma once
#include <cstdint>

#include "runtime/dtype.h"

namespace shardrt {

void copy_strided_cpu(int ndim, const int64_t* shape, void* dst, DType dst_dtype, const int64_t* dst_strides,
                      const void* src, DType src_dtype, const int64_t* src_strides);

// Fills n contiguous elements of `dtype` with `value` (converted).
void fill_cpu(void* dst, DType dtype, int64_t n, double value);

}  // namespace shardrt
