#include "runtime/host_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "runtime/errors.h"

#if defined(__SANITIZE_ADDRESS__)
#define SHARDRT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHARDRT_ASAN 1
#endif
#endif

#ifdef SHARDRT_ASAN
#include <sanitizer/asan_interface.h>
#define SHARDRT_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define SHARDRT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define SHARDRT_POISON(p, n) ((void)(p), (void)(n))
#define SHARDRT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace shardrt {

std::size_t HostBlockCache::class_bytes(std::size_t bytes) {
  if (bytes == 0) return 0;
  if (bytes > SIZE_MAX / 2)
    throw ValueError(detail::concat("cpu_allocator: ", bytes, " bytes requested, more than host memory can hold"));
  if (bytes <= 4096) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  // bytes in (2^k, 2^(k+1)]: round up to a multiple of 2^(k-2).
  std::size_t top = 4096;
  while (top < bytes) top *= 2;  // top = 2^(k+1)
  const std::size_t step = top / 8;
  return (bytes + step - 1) / step * step;
}

void* HostBlockCache::take(std::size_t bytes) {
  const std::size_t size = class_bytes(bytes);
  if (size == 0) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      SHARDRT_UNPOISON(block, size);
      return block;
    }
  }
  void* block = std::aligned_alloc(kAlignment, size);
  if (!block) {
    // Memory parked in the cache may be all that stands between this request and success.
    empty();
    block = std::aligned_alloc(kAlignment, size);
  }
  if (!block)
    throw ValueError(detail::concat("cpu_allocator: out of host memory allocating ", bytes, " bytes (",
                                    reserved_bytes(), " bytes held by ShardRT's host allocator)"));
  std::lock_guard<std::mutex> lock(mutex_);
  reserved_ += size;
  return block;
}

void HostBlockCache::give_back(void* block, std::size_t bytes) {
  if (!block) return;
  const std::size_t size = class_bytes(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_ + size <= limit_) {
      SHARDRT_POISON(block, size);
      free_[size].push_back(block);
      cached_ += size;
      return;
    }
    reserved_ -= size;
  }
  std::free(block);
}

void HostBlockCache::trim_to(std::size_t limit_bytes) {
  // Largest classes first: the fewest frees give back the most memory.
  for (auto it = free_.rbegin(); it != free_.rend() && cached_ > limit_bytes; ++it) {
    std::vector<void*>& blocks = it->second;
    while (!blocks.empty() && cached_ > limit_bytes) {
      void* block = blocks.back();
      blocks.pop_back();
      SHARDRT_UNPOISON(block, it->first);
      std::free(block);
      cached_ -= it->first;
      reserved_ -= it->first;
    }
  }
}

void HostBlockCache::empty() {
  std::lock_guard<std::mutex> lock(mutex_);
  trim_to(0);
  free_.clear();
}

std::size_t HostBlockCache::set_limit(std::size_t limit_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::size_t old = limit_;
  limit_ = limit_bytes;
  trim_to(limit_bytes);
  return old;
}

std::size_t HostBlockCache::limit() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return limit_;
}

int64_t HostBlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(cached_);
}

int64_t HostBlockCache::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(reserved_);
}

std::size_t cpu_cache_limit_from_env(const char* value) {
  if (value == nullptr || *value == '\0') {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    const std::size_t physical = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                                                       : std::size_t{0};
    return std::min<std::size_t>(physical / 4, std::size_t{4} << 30);
  }
  const std::string text(value);
  auto bad = [&] {
    return ValueError(detail::concat("SHARDRT_CPU_CACHE_BYTES=\"", text,
                                     "\": expected a byte count with an optional K, M or G suffix (e.g. 0 to disable "
                                     "the host block cache, 512M, 2G)"));
  };
  if (text.front() < '0' || text.front() > '9') throw bad();
  errno = 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(value, &end, 10);
  if (errno == ERANGE) throw bad();
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, ++end;
  else if (*end == 'M' || *end == 'm') shift = 20, ++end;
  else if (*end == 'G' || *end == 'g') shift = 30, ++end;
  if (*end != '\0') throw bad();
  if (shift > 0 && n > (SIZE_MAX >> shift)) throw bad();
  return static_cast<std::size_t>(n) << shift;
}

}  // namespace shardrt
