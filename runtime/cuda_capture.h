// Whether ShardRT's stream of a device is being captured into a CUDA graph (runtime/cuda/graph.h). Code that would
// read the device from the host (a bounds check, a size) asks this and takes its device-side path instead.
// Safe to include and call in every build: false without CUDA, and for a device that is not usable.
#pragma once

namespace shardrt {

bool stream_capturing(int device);

}  // namespace shardrt
