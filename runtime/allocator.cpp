#include "runtime/allocator.h"

#include <cstdint>
#include <cstdlib>
#include <new>

#include "runtime/cuda_allocator.h"
#include "runtime/errors.h"
#include "runtime/host_cache.h"

namespace shardrt {

namespace {

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() : cache_(cpu_cache_limit_from_env(std::getenv("SHARDRT_CPU_CACHE_BYTES"))) {}
  void* allocate(std::size_t bytes) override {
    void* p = cache_.take(bytes);
    if (p) counter_.on_allocate(bytes);
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) override {
    if (!ptr) return;
    cache_.give_back(ptr, bytes);
    counter_.on_deallocate(bytes);
  }
  MemoryStats stats() const override {
    MemoryStats s = counter_.stats();
    s.cached_bytes = cache_.cached_bytes();
    s.reserved_bytes = cache_.reserved_bytes();
    return s;
  }
  void reset_peak() override { counter_.reset_peak(); }
  HostBlockCache& cache() { return cache_; }

 private:
  ByteCounter counter_;
  HostBlockCache cache_;
};

CpuAllocator& cpu_allocator_instance() {
  // Never destroyed: tensors held by other static objects may be freed after this file's statics are gone.
  static CpuAllocator* instance = new CpuAllocator;
  return *instance;
}

}  // namespace

Allocator& cpu_allocator() { return cpu_allocator_instance(); }
void* cpu_scratch_allocate(std::size_t bytes) { return cpu_allocator_instance().cache().take(bytes); }
void cpu_scratch_free(void* block, std::size_t bytes) { cpu_allocator_instance().cache().give_back(block, bytes); }
void empty_cpu_cache() { cpu_allocator_instance().cache().empty(); }
std::size_t set_cpu_cache_limit(std::size_t bytes) { return cpu_allocator_instance().cache().set_limit(bytes); }

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
  return cuda_caching_allocator(d.index);
}

MemoryStats memory_stats(Device d) { return allocator_for(d).stats(); }
void reset_peak_memory(Device d) { allocator_for(d).reset_peak(); }

}  // namespace shardrt
