// Shared by the CUDA kernel tests (compiled in CUDA builds only): the stream the kernels queue on, device buffers
// with synchronous uploads and downloads, and the DType of a test's element type.
#pragma once
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>
#include <vector>

#include "runtime/cuda/stream.h"
#include "runtime/dtype.h"

namespace shardrt::test {

inline cudaStream_t stream() { return current_stream(0); }

// Device memory for a test, with uploads and downloads ordered on the kernels' stream.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    if (n_ > 0) SHARDRT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }

  T* get() const { return ptr_; }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == n_);
    if (n_ > 0) {
      SHARDRT_CUDA_CHECK(cudaMemcpyAsync(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice, stream()));
    }
    SHARDRT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) {
      SHARDRT_CUDA_CHECK(cudaMemcpyAsync(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost, stream()));
    }
    SHARDRT_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return host;
  }

 private:
  std::size_t n_;
  T* ptr_ = nullptr;
};

template <typename T>
constexpr DType dtype_of_v = std::is_same_v<T, double> ? DType::f64 : DType::f32;

}  // namespace shardrt::test
