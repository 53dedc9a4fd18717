// The runtime's CUDA entry points (runtime/cuda_allocator.h, runtime/cuda/copy_cuda.h, runtime/cuda/random_cuda.h)
// for builds without CUDA, so runtime/*.cpp calls them without a preprocessor guard. Each throws DeviceError
// naming itself and the device; cuda_context_none.cpp does the same for runtime/cuda_context.h.
#include "runtime/cuda/copy_cuda.h"
#include "runtime/cuda/graph.h"
#include "runtime/cuda/random_cuda.h"
#include "runtime/cuda_allocator.h"
#include "runtime/errors.h"

namespace shardrt {

namespace {

[[noreturn]] void unavailable(const char* what, int device) {
  throw DeviceError(detail::concat(what, ": cuda:", device, " requested but ShardRT was built without CUDA"));
}

}  // namespace

Allocator& cuda_caching_allocator(int device) { unavailable("cuda_caching_allocator", device); }

void copy_strided_cuda(int device, int, const int64_t*, void*, DType, const int64_t*, const void*, DType,
                       const int64_t*) {
  unavailable("copy_strided_cuda", device);
}
void fill_cuda(int device, void*, DType, int64_t, double) { unavailable("fill_cuda", device); }
void copy_bytes_host_device(int device, void*, const void*, std::size_t, bool) {
  unavailable("copy_bytes_host_device", device);
}
void copy_bytes_peer(int dst_device, void*, int, const void*, std::size_t) {
  unavailable("copy_bytes_peer", dst_device);
}

void philox_fill_cuda(int device, void*, DType, int64_t, philox::Distribution, uint64_t, uint64_t, double, double) {
  unavailable("philox_fill_cuda", device);
}

// runtime/cuda/graph.h: a graph can be made, but nothing can be captured.
struct CudaGraph::State {};
CudaGraph::CudaGraph() : state_(std::make_unique<State>()) {}
CudaGraph::~CudaGraph() = default;
bool CudaGraph::captured() const { return false; }
void CudaGraph::capture(int device, const std::function<void()>&) { unavailable("CudaGraph::capture", device); }
void CudaGraph::replay() const { unavailable("CudaGraph::replay", -1); }

}  // namespace shardrt
