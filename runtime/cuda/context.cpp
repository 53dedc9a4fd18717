// cuda_context.h for builds with CUDA.
#include "runtime/cuda_context.h"
#include "runtime/cuda_capture.h"

#include <cuda_runtime_api.h>

#include "runtime/cuda/stream.h"

namespace shardrt {

int cuda_device_count() {
  // Asked once: the answer cannot change within a process, and tests ask before every case.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no GPU: report zero devices and leave no pending error behind
      return 0;
    }
    return n;
  }();
  return count;
}

bool stream_capturing(int device) {
  if (device < 0 || device >= cuda_device_count()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  SHARDRT_CUDA_CHECK(cudaStreamIsCapturing(current_stream(device), &status));
  return status != cudaStreamCaptureStatusNone;
}

void cuda_synchronize(int device) { SHARDRT_CUDA_CHECK(cudaStreamSynchronize(current_stream(device))); }

}  // namespace shardrt
