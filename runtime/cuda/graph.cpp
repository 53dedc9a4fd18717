#include "runtime/cuda/graph.h"

#include <cuda_runtime_api.h>

#include "runtime/cuda/stream.h"
#include "runtime/errors.h"

namespace shardrt {

struct CudaGraph::State {
  int device = -1;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;

  void reset() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
  }
  ~State() { reset(); }
};

CudaGraph::CudaGraph() : state_(std::make_unique<State>()) {}
CudaGraph::~CudaGraph() = default;

bool CudaGraph::captured() const { return state_->exec != nullptr; }

void CudaGraph::capture(int device, const std::function<void()>& work) {
  state_->reset();
  cudaStream_t stream = current_stream(device);
  // Thread-local mode: another thread's unsafe call (a cudaMalloc, a synchronisation) does not invalidate this
  // capture, while this thread's own unsafe calls fail loudly.
  SHARDRT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    work();
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);  // leaves the stream usable again
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess) {
    cudaGetLastError();
    throw CudaError(detail::concat("CudaGraph::capture on cuda:", device, ": the capture was invalidated (",
                                   cudaGetErrorName(ended), ": ", cudaGetErrorString(ended),
                                   "); the captured function synchronised with the host or used another stream"));
  }
  state_->graph = graph;
  state_->device = device;
  SHARDRT_CUDA_CHECK(cudaGraphInstantiate(&state_->exec, graph, 0));
}

void CudaGraph::replay() const {
  SHARDRT_CHECK(state_->exec, CudaError, "CudaGraph::replay: nothing was captured");
  SHARDRT_CUDA_CHECK(cudaGraphLaunch(state_->exec, current_stream(state_->device)));
}

}  // namespace shardrt
