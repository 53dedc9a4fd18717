// Device-side element copy with dtype conversion, fill, and the byte copies between host and device memory and
// between devices. Declares no CUDA type: builds without CUDA link runtime/cuda/unavailable.cpp instead.
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/dtype.h"

namespace shardrt {

// Both pointers of the two functions below live on `device`.
// Strided N-d copy (ndim <= 8) converting src_dtype -> dst_dtype, queued on current_stream(device).
void copy_strided_cuda(int device, int ndim, const int64_t* shape, void* dst, DType dst_dtype,
                       const int64_t* dst_strides, const void* src, DType src_dtype, const int64_t* src_strides);
// Fills n contiguous elements with `value` converted to `dtype`.
void fill_cuda(int device, void* dst, DType dtype, int64_t n, double value);

// `bytes` contiguous bytes between host memory and memory of `device` (to_device: host -> device), queued on
// current_stream(device) and waited for, so the host sees the data (or may reuse its buffer) on return.
void copy_bytes_host_device(int device, void* dst, const void* src, std::size_t bytes, bool to_device);
// `bytes` contiguous bytes from src_device's memory to dst_device's, queued on current_stream(dst_device).
void copy_bytes_peer(int dst_device, void* dst, int src_device, const void* src, std::size_t bytes);

}  // namespace shardrt
