#include "runtime/storage.h"

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
  if (owner_) owner_->deallocate(data_, bytes_);
}

}  // namespace shardrt
