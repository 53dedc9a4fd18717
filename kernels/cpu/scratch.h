// An uninitialised workspace of n elements for the duration of one kernel call, from the host block cache
// (runtime/allocator.h: cpu_scratch_allocate). Unlike std::vector it neither zero-fills nor, on the next call,
// takes fresh pages from the kernel.
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/allocator.h"

namespace shardrt::kernels::cpu {

template <typename T>
class Scratch {
 public:
  explicit Scratch(int64_t n)
      : bytes_(static_cast<std::size_t>(n > 0 ? n : 0) * sizeof(T)),
        data_(static_cast<T*>(cpu_scratch_allocate(bytes_))) {}
  ~Scratch() { cpu_scratch_free(data_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() const { return data_; }

 private:
  std::size_t bytes_;
  T* data_;
};

}  // namespace shardrt::kernels::cpu
