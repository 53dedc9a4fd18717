// Shared by the libFuzzer targets: the readers under test take a path (they mmap or libzip-open it), so each input
// is written to one scratch file in /dev/shm (memory, no disk traffic) that the target reuses for every run.
//
// A reader may reject an input only with a typed ShardRT error (runtime/errors.h). Any other exception escapes the
// target on purpose: libFuzzer reports it as a crash, because a caller catching shardrt::Error would not catch it.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace shardrt::fuzz {

// One file per target and process (the corpus replay runs several targets in one process).
inline std::string scratch_path(const char* target) {
  const char* dir = std::getenv("SHARDRT_FUZZ_TMP");
  return std::string(dir ? dir : "/dev/shm") + "/shardrt-" + target + "-" + std::to_string(getpid());
}

// Replaces the scratch file's contents with the input; false only when the scratch folder is unusable.
inline bool write_scratch(const std::string& path, const uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = (size == 0 || std::fwrite(data, 1, size, f) == size) && std::fclose(f) == 0;
  return ok;
}

// Folds every byte of a loaded buffer into a value the compiler must keep, so ASan checks each read of the
// loaded data (a tensor viewing past its mapping would be reported here, not in some later user).
inline uint64_t touch_bytes(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace shardrt::fuzz
