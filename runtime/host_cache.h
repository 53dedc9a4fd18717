// The cache of freed host blocks behind cpu_allocator(). A training step allocates the same sizes every step;
// handing a freed block back to the C library returns large ones to the kernel (they are mmap'd), and the next
// step then pays a page fault and a page clear for every 4 KiB it writes. Keeping freed blocks in size classes and
// handing the same block back for the next request of its class removes that cost, as PyTorch's steps get it from
// glibc's heap and CUDA from its pool.
//
// Bounded: at most limit() bytes sit in the cache (env SHARDRT_CPU_CACHE_BYTES at start-up, 0 disables the
// cache); a freed block that would pass the limit goes back to the C library. Thread-safe (OpenMP regions
// allocate). Under AddressSanitizer a cached block is poisoned, so a use after free is still reported.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace shardrt {

class HostBlockCache {
 public:
  // Every block is aligned to this many bytes (a cache line, and the widest vector load).
  static constexpr std::size_t kAlignment = 64;

  explicit HostBlockCache(std::size_t limit_bytes) : limit_(limit_bytes) {}
  ~HostBlockCache() { empty(); }
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;

  // The bytes a block for a `bytes`-byte request really has: 64-byte multiples up to 4 KiB, then four classes per
  // power of two (at most 25% over the request), so requests of nearby sizes share blocks. 0 for 0; throws when
  // the request cannot be rounded (within a class of SIZE_MAX).
  static std::size_t class_bytes(std::size_t bytes);

  // A block of class_bytes(bytes) bytes: a cached one of that class when there is one, otherwise fresh from the C
  // library (on failure the cache is emptied and the allocation tried once more). nullptr for 0 bytes; throws
  // ValueError when the host is out of memory.
  void* take(std::size_t bytes);
  // Returns a block take(bytes) gave out: it is kept for reuse, or freed when the cache would pass its limit.
  void give_back(void* block, std::size_t bytes);

  // Frees every cached block.
  void empty();
  // Sets the most bytes the cache may hold (0 disables it) and frees cached blocks past it; returns the old limit.
  std::size_t set_limit(std::size_t limit_bytes);
  std::size_t limit() const;
  // Bytes in cached blocks, and bytes held from the C library (blocks handed out plus cached ones), by class size.
  int64_t cached_bytes() const;
  int64_t reserved_bytes() const;

 private:
  void trim_to(std::size_t limit_bytes);  // called with mutex_ held

  mutable std::mutex mutex_;
  std::size_t limit_;
  // Free blocks by class size; the last one freed is the first handed out (it is likeliest still in cache).
  std::map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
  std::size_t reserved_ = 0;
};

// SHARDRT_CPU_CACHE_BYTES parsed: a byte count with an optional K, M or G suffix (powers of 1024); an unset
// or empty variable means the default, a quarter of physical memory, at most 4 GiB. Throws ValueError naming the
// variable on anything else.
std::size_t cpu_cache_limit_from_env(const char* value);

}  // namespace shardrt
