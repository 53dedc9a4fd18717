// What a CPU-only caller may ask about CUDA. Safe to include and call in every build.
#pragma once

namespace shardrt {

// Number of usable CUDA devices: 0 when ShardRT was built without CUDA, or when no driver or GPU is present.
// Never throws.
int cuda_device_count();
inline bool cuda_available() { return cuda_device_count() > 0; }
// Waits for all work queued on the device's ShardRT stream.
void cuda_synchronize(int device);

}  // namespace shardrt
