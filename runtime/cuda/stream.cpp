#include "runtime/cuda/stream.h"

#include <memory>
#include <mutex>
#include <type_traits>

#include "runtime/cuda_context.h"

namespace shardrt {

static_assert(std::is_same_v<CudaStream, cudaStream_t>, "CudaStream must be the CUDA runtime's stream type");

namespace {

// One lazily created stream per device. The table is sized once, from the device count, and never freed:
// streams are used until process exit, and destroying them from a static destructor could run after the CUDA
// runtime has already been torn down.
struct StreamTable {
  int count;
  std::unique_ptr<std::once_flag[]> created;
  std::unique_ptr<cudaStream_t[]> streams;
};

StreamTable& stream_table() {
  static StreamTable* table = [] {
    const int n = cuda_device_count();
    return new StreamTable{n, std::make_unique<std::once_flag[]>(n), std::make_unique<cudaStream_t[]>(n)};
  }();
  return *table;
}

}  // namespace

CudaStream current_stream(int device) {
  StreamTable& table = stream_table();
  SHARDRT_CHECK(device >= 0 && device < table.count, DeviceError, "current_stream: cuda:", device,
                " requested but ", table.count, " CUDA device(s) are usable");
  int active = -1;
  SHARDRT_CUDA_CHECK(cudaGetDevice(&active));
  if (active != device) SHARDRT_CUDA_CHECK(cudaSetDevice(device));
  // Non-blocking: ShardRT's work must not serialise against the legacy default stream that other libraries
  // (or a host program's own CUDA code) may use. If creation throws, the flag stays unset and the next call
  // retries.
  std::call_once(table.created[device], [&] {
    SHARDRT_CUDA_CHECK(cudaStreamCreateWithFlags(&table.streams[device], cudaStreamNonBlocking));
  });
  return table.streams[device];
}

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  // Clear the error so it is not reported again by an unrelated later call (sticky errors stay regardless).
  cudaGetLastError();
  throw CudaError(detail::concat(expr, " failed at ", file, ":", line, ": ", cudaGetErrorName(err), ": ",
                                 cudaGetErrorString(err)));
}

}  // namespace shardrt
