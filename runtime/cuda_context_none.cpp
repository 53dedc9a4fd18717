// cuda_context.h for builds without CUDA: there are no devices.
#include "runtime/cuda_context.h"
#include "runtime/cuda_capture.h"

#include "runtime/errors.h"

namespace shardrt {

int cuda_device_count() { return 0; }
void cuda_synchronize(int device) {
  throw DeviceError(detail::concat("cuda_synchronize: cuda:", device, " requested but ShardRT was built without CUDA"));
}
CudaStream current_stream(int device) {
  throw DeviceError(detail::concat("current_stream: cuda:", device, " requested but ShardRT was built without CUDA"));
}

bool stream_capturing(int) { return false; }

}  // namespace shardrt
