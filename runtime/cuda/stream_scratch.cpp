#include "runtime/cuda/stream_scratch.h"

#include <cuda_runtime_api.h>

#include "runtime/cuda/stream.h"
#include "runtime/cuda_allocator.h"

namespace shardrt {

namespace {

// Makes `waiter` wait for the work queued so far on `producer`.
cudaError_t order_after(cudaStream_t waiter, cudaStream_t producer) {
  cudaEvent_t event;
  cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (err != cudaSuccess) return err;
  err = cudaEventRecord(event, producer);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(waiter, event, 0);
  cudaEventDestroy(event);  // its resources are released once the wait has been satisfied
  return err;
}

}  // namespace

StreamScratch::StreamScratch(std::size_t bytes, CudaStream stream) : stream_(stream), bytes_(bytes) {
  int device = -1;
  SHARDRT_CUDA_CHECK(cudaGetDevice(&device));
  allocator_ = &cuda_caching_allocator(device);
  home_ = current_stream(device);
  ptr_ = allocator_->allocate(bytes_);
  if (stream_ != home_) {
    const cudaError_t err = order_after(stream_, home_);
    if (err != cudaSuccess) {
      allocator_->deallocate(ptr_, bytes_);
      throw_cuda_error(err, "order_after(stream, home)", __FILE__, __LINE__);
    }
  }
}

StreamScratch::~StreamScratch() {
  if (stream_ != home_ && order_after(home_, stream_) != cudaSuccess) cudaStreamSynchronize(stream_);
  allocator_->deallocate(ptr_, bytes_);
}

}  // namespace shardrt
