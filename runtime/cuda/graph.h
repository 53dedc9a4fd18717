// A CUDA graph of work queued on ShardRT's stream of one device: capture a function once (for fixed shapes and
// fixed tensor storage), then replay it with one launch per call and no host work per kernel.
//
// What may run inside the captured function: anything that only queues work on current_stream(device) — kernel
// launches, cuBLAS/cuBLASLt GEMMs (their workspace is ShardRT's, set for that stream), device-to-device copies,
// fills, and stream-ordered allocations and frees from the caching allocator (captured as graph memory nodes;
// every temporary must be freed inside the function, so persistent tensors — parameters, grads bound to arena
// buffers, optimizer state, the loss slot — are allocated before capture). What may not: host synchronisation
// (item(), to_vector(), copies to or from the host, cudaStreamSynchronize), or work on another stream without an
// event joining it back. Host scalars passed to kernels (learning rate, step count) are baked in at capture; a
// replay reuses them. Capturing fails with CudaError naming what CUDA refused.
//
// The header names no CUDA type, so it is installed in every build; without CUDA, capture throws DeviceError.
#pragma once
#include <functional>
#include <memory>

namespace shardrt {

class CudaGraph {
 public:
  CudaGraph();
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records `work` as queued on current_stream(device) (nothing runs yet) and instantiates the graph. A second
  // capture replaces the first.
  void capture(int device, const std::function<void()>& work);
  // Queues one run of the captured work on the device's ShardRT stream; never synchronises. CudaError when
  // nothing was captured or the launch fails.
  void replay() const;
  bool captured() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace shardrt
