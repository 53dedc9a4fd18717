#include "runtime/allocator.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "runtime/errors.h"
#ifdef SHARDRT_WITH_CUDA
#include "runtime/cuda_allocator.h"
#endif

namespace shardrt {

namespace {

// Byte counters shared by the host allocator; atomics because OpenMP regions may allocate.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    constexpr std::size_t kAlign = 64;
    std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (!p) throw ValueError(detail::concat("cpu_allocator: out of host memory allocating ", bytes, " bytes"));
    int64_t now = current_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    allocations_.fetch_add(1);
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) override {
    if (!ptr) return;
    std::free(ptr);
    current_.fetch_sub(static_cast<int64_t>(bytes));
  }
  MemoryStats stats() const override { return {current_.load(), peak_.load(), allocations_.load()}; }
  void reset_peak() override { peak_.store(current_.load()); }

 private:
  std::atomic<int64_t> current_{0}, peak_{0}, allocations_{0};
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator instance;
  return instance;
}

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
#ifdef SHARDRT_WITH_CUDA
  return cuda_caching_allocator(d.index);
#else
  throw DeviceError(detail::concat("allocator_for: ", d.str(), " requested but ShardRT was built without CUDA"));
#endif
}

MemoryStats memory_stats(Device d) { return allocator_for(d).stats(); }
void reset_peak_memory(Device d) { allocator_for(d).reset_peak(); }

}  // namespace shardrt
