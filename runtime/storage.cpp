#include "runtime/storage.h"

#include "runtime/errors.h"

namespace shardrt {

std::shared_ptr<Storage> Storage::allocate(std::size_t bytes, Device device) {
  Allocator& a = allocator_for(device);
  void* p = a.allocate(bytes);
  return std::shared_ptr<Storage>(new Storage(p, bytes, device, &a, nullptr));
}

std::shared_ptr<Storage> Storage::wrap(void* data, std::size_t bytes, Device device,
                                       std::shared_ptr<void> keep_alive) {
  return std::shared_ptr<Storage>(new Storage(data, bytes, device, nullptr, std::move(keep_alive)));
}

Storage::~Storage() {
  if (owner_ && resident_) owner_->deallocate(data_, bytes_);
}

void Storage::release() {
  SHARDRT_CHECK(owner_, ValueError, "Storage::release: ", bytes_, " bytes of memory owned elsewhere (a mapped file or a "
                "caller's buffer) cannot be released");
  if (!resident_) return;
  owner_->deallocate(data_, bytes_);
  data_ = nullptr;
  resident_ = false;
}

void Storage::refill() {
  SHARDRT_CHECK(owner_, ValueError, "Storage::refill: ", bytes_, " bytes of memory owned elsewhere cannot be refilled");
  if (resident_) return;
  data_ = owner_->allocate(bytes_);
  resident_ = true;
}

}  // namespace shardrt
