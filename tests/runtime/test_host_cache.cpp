// The host block cache behind cpu_allocator(): a freed block comes back for the next request of its size class,
// current / peak bytes stay the bytes handed to tensors through reuse, the cache never holds more than its limit,
// a zero limit disables it, OpenMP threads allocate and free at once without losing a byte, and
// SHARDRT_CPU_CACHE_BYTES parses or fails with a typed error.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "runtime/host_cache.h"
#include "tests/runtime/require_typed_error.h"

using namespace shardrt;

namespace {

// Sets the cache's limit for one test case and empties the cache on both ends, so each case starts from a known
// state and leaves the process's allocator as it found it.
struct CacheLimitScope {
  explicit CacheLimitScope(std::size_t limit) : old(set_cpu_cache_limit(limit)) { empty_cpu_cache(); }
  ~CacheLimitScope() {
    empty_cpu_cache();
    set_cpu_cache_limit(old);
  }
  std::size_t old;
};

MemoryStats cpu_stats() { return memory_stats(Device::cpu()); }

}  // namespace

TEST_CASE("host cache: size classes round up by at most a quarter, in 64-byte multiples", "[runtime][host_cache]") {
  CHECK(HostBlockCache::class_bytes(0) == 0);
  CHECK(HostBlockCache::class_bytes(1) == 64);
  CHECK(HostBlockCache::class_bytes(64) == 64);
  CHECK(HostBlockCache::class_bytes(65) == 128);
  CHECK(HostBlockCache::class_bytes(4096) == 4096);
  CHECK(HostBlockCache::class_bytes(4097) == 5120);  // (4 KiB, 8 KiB] in steps of 1 KiB
  CHECK(HostBlockCache::class_bytes(1 << 20) == (1 << 20));
  CHECK(HostBlockCache::class_bytes((1 << 20) + 1) == (1 << 20) + (1 << 18));
  for (std::size_t bytes = 1; bytes < (std::size_t{1} << 34); bytes = bytes * 3 + 7) {
    INFO("bytes=" << bytes);
    const std::size_t c = HostBlockCache::class_bytes(bytes);
    CHECK(c >= bytes);
    CHECK(c % HostBlockCache::kAlignment == 0);
    if (bytes > 4096) CHECK(static_cast<double>(c) <= 1.25 * static_cast<double>(bytes));
  }
}

TEST_CASE("host cache: a freed block is handed back for the next request of its class", "[runtime][host_cache]") {
  CacheLimitScope scope(std::size_t{64} << 20);
  Allocator& a = cpu_allocator();
  const MemoryStats before = cpu_stats();
  const std::size_t bytes = 3 << 20, cls = HostBlockCache::class_bytes(bytes);
  void* p = a.allocate(bytes);
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
  CHECK(cpu_stats().current_bytes == before.current_bytes + static_cast<int64_t>(bytes));
  CHECK(cpu_stats().reserved_bytes == before.reserved_bytes + static_cast<int64_t>(cls));
  a.deallocate(p, bytes);
  CHECK(cpu_stats().current_bytes == before.current_bytes);
  CHECK(cpu_stats().cached_bytes == static_cast<int64_t>(cls));
  CHECK(cpu_stats().reserved_bytes == before.reserved_bytes + static_cast<int64_t>(cls));

  // The same class (a request a little smaller) gets the same block; a request of another class does not.
  void* q = a.allocate(bytes - 1000);
  CHECK(q == p);
  CHECK(cpu_stats().cached_bytes == 0);
  CHECK(cpu_stats().current_bytes == before.current_bytes + static_cast<int64_t>(bytes - 1000));
  void* r = a.allocate(bytes);
  CHECK(r != p);
  a.deallocate(r, bytes);
  a.deallocate(q, bytes - 1000);
  CHECK(cpu_stats().cached_bytes == 2 * static_cast<int64_t>(cls));
  empty_cpu_cache();
  CHECK(cpu_stats().cached_bytes == 0);
  CHECK(cpu_stats().reserved_bytes == before.reserved_bytes);
}

TEST_CASE("host cache: current and peak count tensor bytes, not cached ones", "[runtime][host_cache]") {
  CacheLimitScope scope(std::size_t{64} << 20);
  const MemoryStats before = cpu_stats();
  reset_peak_memory(Device::cpu());
  const int64_t bytes = 100'000 * 4;
  for (int step = 0; step < 5; ++step) {
    Tensor t = zeros({100'000}, {DType::f32});
    t.data<float>()[99'999] = 1.0f;
    CHECK(cpu_stats().current_bytes == before.current_bytes + bytes);
    CHECK(t.data<float>()[99'999] == 1.0f);
  }
  const MemoryStats after = cpu_stats();
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.peak_bytes == before.current_bytes + bytes);  // one tensor at a time, though its block stays
  CHECK(after.allocations >= before.allocations + 5);
  CHECK(after.cached_bytes >= static_cast<int64_t>(HostBlockCache::class_bytes(bytes)));
  // A reused block is the caller's fresh storage: zeros() still zeroes it.
  Tensor again = zeros({100'000}, {DType::f32});
  CHECK(again.data<float>()[99'999] == 0.0f);
}

TEST_CASE("host cache: never holds more than its limit; lowering the limit frees blocks", "[runtime][host_cache]") {
  const std::size_t bytes = 1 << 20, cls = HostBlockCache::class_bytes(bytes);
  CacheLimitScope scope(3 * cls);
  Allocator& a = cpu_allocator();
  const MemoryStats before = cpu_stats();
  std::vector<void*> blocks;
  for (int i = 0; i < 5; ++i) blocks.push_back(a.allocate(bytes));
  for (void* p : blocks) a.deallocate(p, bytes);
  CHECK(cpu_stats().cached_bytes == 3 * static_cast<int64_t>(cls));
  CHECK(cpu_stats().reserved_bytes == before.reserved_bytes + 3 * static_cast<int64_t>(cls));
  CHECK(set_cpu_cache_limit(cls) == 3 * cls);
  CHECK(cpu_stats().cached_bytes == static_cast<int64_t>(cls));
  CHECK(cpu_stats().reserved_bytes == before.reserved_bytes + static_cast<int64_t>(cls));
  CHECK(cpu_stats().current_bytes == before.current_bytes);
}

TEST_CASE("host cache: a zero limit disables it", "[runtime][host_cache]") {
  CacheLimitScope scope(0);
  Allocator& a = cpu_allocator();
  const MemoryStats before = cpu_stats();
  void* p = a.allocate(1 << 20);
  a.deallocate(p, 1 << 20);
  CHECK(cpu_stats().cached_bytes == 0);
  CHECK(cpu_stats().reserved_bytes == before.reserved_bytes);
  CHECK(cpu_stats().current_bytes == before.current_bytes);
}

TEST_CASE("host cache: OpenMP threads allocate and free at once without losing a byte", "[runtime][host_cache]") {
  CacheLimitScope scope(std::size_t{8} << 20);
  Allocator& a = cpu_allocator();
  const MemoryStats before = cpu_stats();
  int corrupted = 0;
#pragma omp parallel for num_threads(4) schedule(dynamic) reduction(+ : corrupted)
  for (int i = 0; i < 400; ++i) {
    // Sizes from 64 bytes to 1.5 MiB, several per class, each block filled and checked while another thread may
    // be taking or returning blocks of the same class.
    const std::size_t bytes = 64 + static_cast<std::size_t>(i % 23) * 70'001;
    auto* p = static_cast<unsigned char*>(a.allocate(bytes));
    std::memset(p, i & 0xff, bytes);
    auto* q = static_cast<unsigned char*>(a.allocate(bytes / 2 + 1));
    std::memset(q, (i + 1) & 0xff, bytes / 2 + 1);
    for (std::size_t k = 0; k < bytes; k += 4093) corrupted += p[k] != (i & 0xff);
    a.deallocate(q, bytes / 2 + 1);
    a.deallocate(p, bytes);
  }
  CHECK(corrupted == 0);
  const MemoryStats after = cpu_stats();
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.allocations == before.allocations + 800);
  CHECK(after.cached_bytes <= static_cast<int64_t>(std::size_t{8} << 20));
  CHECK(after.reserved_bytes - after.cached_bytes == before.reserved_bytes - before.cached_bytes);
  empty_cpu_cache();
  CHECK(cpu_stats().reserved_bytes == before.reserved_bytes - before.cached_bytes);
}

TEST_CASE("host cache: SHARDRT_CPU_CACHE_BYTES takes a byte count with K, M or G", "[runtime][host_cache]") {
  CHECK(cpu_cache_limit_from_env("0") == 0);
  CHECK(cpu_cache_limit_from_env("4096") == 4096);
  CHECK(cpu_cache_limit_from_env("512M") == (std::size_t{512} << 20));
  CHECK(cpu_cache_limit_from_env("2g") == (std::size_t{2} << 30));
  CHECK(cpu_cache_limit_from_env("8K") == 8192);
  const std::size_t fallback = cpu_cache_limit_from_env(nullptr);
  CHECK(fallback > 0);
  CHECK(fallback <= (std::size_t{4} << 30));
  CHECK(cpu_cache_limit_from_env("") == fallback);
  for (const char* bad : {"lots", "-1", "12X", "1.5G", "99999999999999999999", "18446744073709551615G"}) {
    INFO(bad);
    REQUIRE_TYPED_ERROR(cpu_cache_limit_from_env(bad), ValueError, "SHARDRT_CPU_CACHE_BYTES");
  }
}
