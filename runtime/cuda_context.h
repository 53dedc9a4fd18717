// What a CPU-only caller may ask about CUDA. Safe to include and call in every build: it names no CUDA header.
#pragma once

// The CUDA runtime's stream object, declared opaque: CudaStream is exactly cudaStream_t's type, so .cu files
// pass it straight to CUDA while headers that take a stream stay includable in builds without CUDA.
struct CUstream_st;

namespace shardrt {

using CudaStream = CUstream_st*;

// Number of usable CUDA devices: 0 when ShardRT was built without CUDA, or when no driver or GPU is present.
// Never throws.
int cuda_device_count();
inline bool cuda_available() { return cuda_device_count() > 0; }
// Waits for all work queued on the device's ShardRT stream.
void cuda_synchronize(int device);
// The stream on which ShardRT queues all work for a device (one non-blocking stream per device, created on
// first use). Makes `device` current as a side effect. DeviceError when the device is not usable, which is
// every device in a build without CUDA.
CudaStream current_stream(int device);

}  // namespace shardrt
