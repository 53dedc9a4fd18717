#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/cuda/stream.h"
#include "runtime/cuda_allocator.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"
#include "runtime/logging.h"

namespace shardrt {

namespace {

// Stream-ordered allocations from a memory pool owned by ShardRT (so its settings do not change the device's
// default pool, which other libraries in the process may use). All allocations and frees go on
// current_stream(device): a block freed there can be handed out again to the next allocation on the same
// stream without any host synchronisation.
class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device) : device_(device) {}

  void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    cudaStream_t stream = current_stream(device_);
    cudaMemPool_t pool = this->pool(stream);
    void* p = nullptr;
    cudaError_t err = cudaMallocFromPoolAsync(&p, bytes, pool, stream);
    if (err == cudaErrorMemoryAllocation) {
      // The pool may hold enough free memory in pieces too small for this request. Once the stream has
      // drained, trimming returns every unused block to the driver, which can then map one large block.
      cudaGetLastError();
      SHARDRT_CUDA_CHECK(cudaStreamSynchronize(stream));
      SHARDRT_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
      err = cudaMallocFromPoolAsync(&p, bytes, pool, stream);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw CudaError(detail::concat("cuda_caching_allocator: allocating ", bytes, " bytes on cuda:", device_,
                                     " failed with ", cudaGetErrorName(err), " (", cudaGetErrorString(err), "); ",
                                     counter_.current_bytes(), " bytes are in use by ShardRT on that device"));
    }
    counter_.on_allocate(bytes);
    return p;
  }

  // Called from Storage's destructor, so it must not throw. Freeing is queued behind all work already on the
  // stream, which is what lets a tensor be dropped right after launching the kernels that read it.
  void deallocate(void* ptr, std::size_t bytes) override {
    if (!ptr) return;
    counter_.on_deallocate(bytes);
    // The caller's current device is put back afterwards: a thread working on another device may drop this
    // tensor.
    int active = -1;
    cudaError_t err = cudaGetDevice(&active);
    if (err == cudaSuccess && active != device_) err = cudaSetDevice(device_);
    if (err == cudaSuccess) err = cudaFreeAsync(ptr, stream_);
    if (active >= 0 && active != device_) cudaSetDevice(active);
    // At process exit the runtime may already be unloaded; the memory goes back with the context anyway.
    if (err == cudaSuccess || err == cudaErrorCudartUnloading) return;
    cudaGetLastError();
    log_warn("cuda_caching_allocator: freeing ", bytes, " bytes on cuda:", device_, " failed with ",
             cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  }

  MemoryStats stats() const override { return counter_.stats(); }
  void reset_peak() override { counter_.reset_peak(); }

 private:
  // Created on the first allocation, so an allocator that is only asked for stats never touches the device.
  cudaMemPool_t pool(cudaStream_t stream) {
    std::call_once(pool_created_, [&] {
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = device_;
      SHARDRT_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
      // Keep every freed block: by default the pool returns memory to the driver at each synchronisation,
      // which would make every training step pay for fresh allocations.
      std::uint64_t keep_all = UINT64_MAX;  // the attribute is a cuuint64_t, which is uint64_t
      SHARDRT_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_all));
      stream_ = stream;
    });
    return pool_;
  }

  const int device_;
  std::once_flag pool_created_;
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t stream_ = nullptr;  // current_stream(device_), kept so deallocate needs no call that can throw
  ByteCounter counter_;
};

}  // namespace

Allocator& cuda_caching_allocator(int device) {
  // Never destroyed: tensors held in static objects are released during static destruction, in an order we do
  // not control, and must still find their allocator.
  static const auto* const allocators = [] {
    auto* table = new std::vector<std::unique_ptr<CudaCachingAllocator>>();
    for (int d = 0; d < cuda_device_count(); ++d) table->push_back(std::make_unique<CudaCachingAllocator>(d));
    return table;
  }();
  const int count = static_cast<int>(allocators->size());
  SHARDRT_CHECK(device >= 0 && device < count, DeviceError, "cuda_caching_allocator: cuda:", device, " requested but ",
                count, " CUDA device(s) are usable");
  return *(*allocators)[device];
}

}  // namespace shardrt
