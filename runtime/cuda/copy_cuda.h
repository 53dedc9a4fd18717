// Device-side element copy with dtype conversion, and fill. Both pointers live on `device`.
#pragma once
#include <cstdint>

#include "runtime/dtype.h"

namespace shardrt {

// Strided N-d copy (ndim <= 8) converting src_dtype -> dst_dtype, queued on current_stream(device).
void copy_strided_cuda(int device, int ndim, const int64_t* shape, void* dst, DType dst_dtype,
                       const int64_t* dst_strides, const void* src, DType src_dtype, const int64_t* src_strides);
// Fills n contiguous elements with `value` converted to `dtype`.
void fill_cuda(int device, void* dst, DType dtype, int64_t n, double value);

}  // namespace shardrt
