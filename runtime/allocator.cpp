#include "runtime/allocator.h"

#include <cstdint>
#include <cstdlib>
#include <new>

#include "runtime/cuda_allocator.h"
#include "runtime/errors.h"

namespace shardrt {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    constexpr std::size_t kAlign = 64;
    // Rounding a request within 63 bytes of SIZE_MAX up would wrap to 0, and aligned_alloc(64, 0) returns a
    // valid pointer to nothing.
    if (bytes > SIZE_MAX - (kAlign - 1))
      throw ValueError(detail::concat("cpu_allocator: ", bytes, " bytes requested, more than host memory can hold"));
    std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (!p) throw ValueError(detail::concat("cpu_allocator: out of host memory allocating ", bytes, " bytes"));
    counter_.on_allocate(bytes);
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) override {
    if (!ptr) return;
    std::free(ptr);
    counter_.on_deallocate(bytes);
  }
  MemoryStats stats() const override { return counter_.stats(); }
  void reset_peak() override { counter_.reset_peak(); }

 private:
  ByteCounter counter_;
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator instance;
  return instance;
}

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
  return cuda_caching_allocator(d.index);
}

MemoryStats memory_stats(Device d) { return allocator_for(d).stats(); }
void reset_peak_memory(Device d) { allocator_for(d).reset_peak(); }

}  // namespace shardrt
