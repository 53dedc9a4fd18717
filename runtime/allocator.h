// Allocators. Every byte a Tensor holds goes through one of these, so current and peak bytes per device
// are exact: peak memory per rank is a figure ShardRT publishes. Both allocators cache freed blocks (host:
// runtime/host_cache.h); current and peak count the bytes handed to tensors, never the cache.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime/device.h"

namespace shardrt {

struct MemoryStats {
  int64_t current_bytes = 0;  // bytes handed out and not yet returned
  int64_t peak_bytes = 0;     // high-water mark of current_bytes since the last reset_peak
  int64_t allocations = 0;    // number of allocate() calls
  // Host only (0 on CUDA): bytes in freed blocks kept for reuse, and bytes held from the system (blocks handed
  // out, rounded up to their size class, plus the cached ones).
  int64_t cached_bytes = 0;
  int64_t reserved_bytes = 0;
};

// The current, peak and allocation counts of one allocator; atomics because OpenMP regions and other threads
// may allocate.
class ByteCounter {
 public:
  void on_allocate(std::size_t bytes) {
    const int64_t now = current_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    allocations_.fetch_add(1);
  }
  void on_deallocate(std::size_t bytes) { current_.fetch_sub(static_cast<int64_t>(bytes)); }
  int64_t current_bytes() const { return current_.load(); }
  MemoryStats stats() const { return {current_.load(), peak_.load(), allocations_.load()}; }
  void reset_peak() { peak_.store(current_.load()); }

 private:
  std::atomic<int64_t> current_{0}, peak_{0}, allocations_{0};
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns storage for `bytes` bytes (nullptr when bytes == 0). Throws on exhaustion.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
};

// 64-byte aligned host memory, through the host block cache.
Allocator& cpu_allocator();
// Workspace a kernel uses within one call (im2col tiles): 64-byte aligned host blocks from the same cache, so a
// call that repeats stops paying fresh pages, but not counted in current / peak (those are tensor bytes); they
// are in reserved_bytes while held. Contents are uninitialised. cpu_scratch_free takes the same byte count.
void* cpu_scratch_allocate(std::size_t bytes);
void cpu_scratch_free(void* block, std::size_t bytes);

// Frees every block the host cache holds (memory_stats(cpu).cached_bytes becomes 0).
void empty_cpu_cache();
// The most bytes the host cache may hold (0 disables it; the start-up value is SHARDRT_CPU_CACHE_BYTES, see
// cpu_cache_limit_from_env); blocks past the new limit are freed. Returns the previous limit.
std::size_t set_cpu_cache_limit(std::size_t bytes);
// The allocator for a device: cpu_allocator() or the CUDA caching allocator of that ordinal.
Allocator& allocator_for(Device d);

MemoryStats memory_stats(Device d);
void reset_peak_memory(Device d);

}  // namespace shardrt
