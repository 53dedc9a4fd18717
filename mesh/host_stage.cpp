#include "mesh/host_stage.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <vector>

#include "runtime/cuda/stream.h"

namespace shardrt {

namespace {

// Free lists by power-of-two block size. Never destroyed: blocks may be returned during static destruction,
// after the CUDA runtime may already be gone.
class PinnedPool {
 public:
  void* take(std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& list = free_[bytes];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    SHARDRT_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  void give(void* p, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[bytes].push_back(p);
  }

 private:
  std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_;
};

PinnedPool& pool() {
  static auto* p = new PinnedPool;
  return *p;
}

std::size_t block_size(std::size_t bytes) {
  std::size_t b = 4096;
  while (b < bytes) b <<= 1;
  return b;
}

}  // namespace

Tensor pinned_host_like(const Tensor& t) {
  if (t.nbytes() == 0) return Tensor::empty(t.shape(), t.dtype(), Device::cpu());
  std::size_t cap = block_size(t.nbytes());
  void* p = pool().take(cap);
  std::shared_ptr<void> keep(p, [cap](void* q) { pool().give(q, cap); });
  return Tensor::from_blob(p, t.shape(), t.dtype(), Device::cpu(), std::move(keep));
}

}  // namespace shardrt
