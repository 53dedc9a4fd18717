// Device scratch for work queued on any stream, from the current device's caching allocator, for kernels that
// need a temporary buffer (e.g. the per-chunk partial sums of a deterministic reduction).
#pragma once
#include <cstddef>

#include "runtime/allocator.h"
#include "runtime/cuda_context.h"

namespace shardrt {

// The caching allocator queues its allocations and frees on ShardRT's stream for the device (`home`); when
// `stream` is another stream, events order the allocation before the first use on `stream`, and the last use on
// `stream` before the free. Scoped: the buffer is released (stream-ordered) when the object goes.
class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, CudaStream stream);
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  // Also runs when a launch threw, so it cannot throw itself; if the streams cannot be ordered by an event it
  // waits for `stream` on the host instead.
  ~StreamScratch();

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  CudaStream stream_;
  CudaStream home_ = nullptr;
  std::size_t bytes_;
  Allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
};

}  // namespace shardrt
