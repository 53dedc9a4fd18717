// A block of memory on one device, shared by every Tensor (and view) that uses it.
#pragma once
#include <cstddef>
#include <memory>

#include "runtime/allocator.h"
#include "runtime/device.h"

namespace shardrt {

class Storage {
 public:
  // Owned memory from the device's allocator.
  static std::shared_ptr<Storage> allocate(std::size_t bytes, Device device);
  // Memory owned by someone else (an mmap'd file, a caller's buffer). `keep_alive` is held for as long as
  // the storage lives; pass nullptr when the caller guarantees the memory outlives every tensor on it.
  static std::shared_ptr<Storage> wrap(void* data, std::size_t bytes, Device device,
                                       std::shared_ptr<void> keep_alive);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  // Owned storage only (else ValueError): release() gives the bytes back to the allocator (current and peak bytes
  // show it) but keeps this object, so every Tensor and view on it stays a valid handle — an autograd node that
  // saved one still holds it — while reading or writing it is a ValueError; refill() allocates the same number of
  // bytes again (contents undefined) at a possibly new address, which every view sees since views resolve their
  // pointer through the storage. ZeRO-3 parameters (optim/zero3.h) live on such storage between their gathers.
  // Neither is thread-safe against concurrent use of the tensors.
  void release();
  void refill();
  bool resident() const { return resident_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, std::size_t bytes, Device device, Allocator* owner, std::shared_ptr<void> keep_alive)
      : data_(data), bytes_(bytes), device_(device), owner_(owner), keep_alive_(std::move(keep_alive)) {}

  void* data_;
  std::size_t bytes_;
  Device device_;
  Allocator* owner_;  // null for wrapped memory
  std::shared_ptr<void> keep_alive_;
  bool resident_ = true;
};

}  // namespace shardrt
