#include "kernels/cuda/conv.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cuda/stream.h"
#include "runtime/cuda/stream_scratch.h"
#include "runtime/errors.h"

// cuDNN 9 marks the descriptor-based convolution API deprecated in favour of its graph API; it is still shipped and
// supported, and it is the plain route for fixed convolutions (the graph API pays off for fused patterns).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace shardrt::kernels::cuda {
namespace {

// ---- the problem as cuDNN sees it ----------------------------------------------------------------------------------

// cuDNN's "x" (input, channels c_x), "y" (output, channels c_y) and filter (c_y, c_x, *kernel). A convolution maps
// our x to our y. The transposed patch convolution is the adjoint of a convolution with stride = kernel, so cuDNN's
// x is our y (B, c_out, in·k), cuDNN's y is our x (B, c_in, in) and the filter (c_in, c_out, k) is ours unchanged:
// our forward is cuDNN's backward data, our input grad its forward, our weight grad its backward filter.
struct Problem {
  int spatial = 2;  // cuDNN's legacy API wants at least 2 spatial axes: a 1-d convolution gets a unit axis
  int batch = 0, c_x = 0, c_y = 0;
  int x[3] = {1, 1, 1}, y[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  int stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dilation[3] = {1, 1, 1};
};

std::string geometry_str(const char* op, const ConvGeometry& g) {
  std::string s = detail::concat(op, " B=", g.batch, " c_in=", g.c_in, " c_out=", g.c_out, " in=");
  for (int d = 0; d < g.nd; ++d) s += detail::concat(d ? "x" : "", g.in[d]);
  s += " kernel=";
  for (int d = 0; d < g.nd; ++d) s += detail::concat(d ? "x" : "", g.kernel[d]);
  s += " stride=";
  for (int d = 0; d < g.nd; ++d) s += detail::concat(d ? "x" : "", g.stride[d]);
  return s;
}

int to_int(const char* op, const ConvGeometry& g, int64_t v) {
  SHARDRT_CHECK(v <= INT_MAX, ShapeError, op, ": an extent of ", v, " exceeds cuDNN's 32-bit sizes (",
                geometry_str(op, g), "); split the batch or the domain over more ranks");
  return static_cast<int>(v);
}

Problem make_problem(const char* op, const ConvGeometry& g, bool transposed) {
  Problem p;
  p.spatial = g.nd == 3 ? 3 : 2;
  p.batch = to_int(op, g, g.batch);
  p.c_x = to_int(op, g, transposed ? g.c_out : g.c_in);
  p.c_y = to_int(op, g, transposed ? g.c_in : g.c_out);
  for (int d = 0; d < 3; ++d) {
    p.kernel[d] = to_int(op, g, g.kernel[d]);
    if (transposed) {
      p.x[d] = to_int(op, g, g.in[d] * g.kernel[d]);
      p.y[d] = to_int(op, g, g.in[d]);
      p.stride[d] = p.kernel[d];
    } else {
      p.x[d] = to_int(op, g, g.in[d]);
      p.y[d] = to_int(op, g, g.out[d]);
      p.stride[d] = to_int(op, g, g.stride[d]);
      p.pad[d] = to_int(op, g, g.pad[d]);
      p.dilation[d] = to_int(op, g, g.dilation[d]);
    }
  }
  // Element counts too: the legacy API indexes with int.
  to_int(op, g, int64_t{p.batch} * p.c_x * p.x[0] * p.x[1] * p.x[2]);
  to_int(op, g, int64_t{p.batch} * p.c_y * p.y[0] * p.y[1] * p.y[2]);
  return p;
}

// ---- errors, handles -----------------------------------------------------------------------------------------------

void check_cudnn(cudnnStatus_t status, const char* call, const char* op, const ConvGeometry& g) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw CudaError(detail::concat(op, ": ", call, " failed with ", cudnnGetErrorString(status), " for ",
                                   geometry_str(op, g)));
  }
}

// One cuDNN handle per device, created on its first convolution and never destroyed (at exit the CUDA runtime
// may be gone before static destructors run). A handle holds the stream it runs on, so each call sets it under
// `mutex`.
struct DeviceDnn {
  std::once_flag created;
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
};

int current_device() {
  int device = -1;
  SHARDRT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

DeviceDnn& dnn_for(int device, const char* op, const ConvGeometry& g) {
  static const auto* const table = [] {
    auto* t = new std::vector<std::unique_ptr<DeviceDnn>>();
    for (int d = 0; d < cuda_device_count(); ++d) t->push_back(std::make_unique<DeviceDnn>());
    return t;
  }();
  SHARDRT_CHECK(device >= 0 && device < static_cast<int>(table->size()), DeviceError, op, ": current device cuda:",
                device, " is not one of the ", table->size(), " usable CUDA device(s)");
  DeviceDnn& dnn = *(*table)[device];
  std::call_once(dnn.created, [&] { check_cudnn(cudnnCreate(&dnn.handle), "cudnnCreate", op, g); });
  return dnn;
}

// ---- descriptors and algorithms, once per problem ------------------------------------------------------------------

template <typename T>
constexpr cudnnDataType_t kDataType = sizeof(T) == sizeof(double) ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;

// Whether cuDNN may use an algorithm: reproducible (no atomics) and without tensor-core rounding, so f32 stays
// f32 (TF32 would differ from the CPU in the fourth digit). CUDNN_DEFAULT_MATH permits TF32 for f32 data on Ampere
// and later, so for f32 only FMA math is taken; f64 has no tensor-core path to avoid.
bool acceptable(cudnnDataType_t type, cudnnStatus_t status, cudnnDeterminism_t determinism, cudnnMathType_t math) {
  const bool fma_only = math == CUDNN_FMA_MATH || (math == CUDNN_DEFAULT_MATH && type == CUDNN_DATA_DOUBLE);
  return status == CUDNN_STATUS_SUCCESS && determinism == CUDNN_DETERMINISTIC && fma_only;
}

struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, x_bias = nullptr, y_bias = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t forward{};
  cudnnConvolutionBwdDataAlgo_t backward_data{};
  cudnnConvolutionBwdFilterAlgo_t backward_filter{};
  std::size_t forward_bytes = 0, backward_data_bytes = 0, backward_filter_bytes = 0;
};

void set_tensor(cudnnTensorDescriptor_t desc, cudnnDataType_t type, int spatial, int n, int c, const int* extent,
                const char* op, const ConvGeometry& g) {
  int dims[5] = {n, c, extent[0], extent[1], extent[2]};
  int strides[5];
  strides[1 + spatial] = 1;
  for (int d = spatial; d >= 0; --d) strides[d] = strides[d + 1] * dims[d + 1];
  check_cudnn(cudnnSetTensorNdDescriptor(desc, type, 2 + spatial, dims, strides), "cudnnSetTensorNdDescriptor", op,
              g);
}

template <typename T>
Plan make_plan(cudnnHandle_t handle, const Problem& p, const char* op, const ConvGeometry& g) {
  const cudnnDataType_t type = kDataType<T>;
  Plan plan;
  check_cudnn(cudnnCreateTensorDescriptor(&plan.x), "cudnnCreateTensorDescriptor", op, g);
  check_cudnn(cudnnCreateTensorDescriptor(&plan.y), "cudnnCreateTensorDescriptor", op, g);
  check_cudnn(cudnnCreateTensorDescriptor(&plan.x_bias), "cudnnCreateTensorDescriptor", op, g);
  check_cudnn(cudnnCreateTensorDescriptor(&plan.y_bias), "cudnnCreateTensorDescriptor", op, g);
  check_cudnn(cudnnCreateFilterDescriptor(&plan.filter), "cudnnCreateFilterDescriptor", op, g);
  check_cudnn(cudnnCreateConvolutionDescriptor(&plan.conv), "cudnnCreateConvolutionDescriptor", op, g);
  const int ones[3] = {1, 1, 1};
  set_tensor(plan.x, type, p.spatial, p.batch, p.c_x, p.x, op, g);
  set_tensor(plan.y, type, p.spatial, p.batch, p.c_y, p.y, op, g);
  set_tensor(plan.x_bias, type, p.spatial, 1, p.c_x, ones, op, g);
  set_tensor(plan.y_bias, type, p.spatial, 1, p.c_y, ones, op, g);
  const int filter_dims[5] = {p.c_y, p.c_x, p.kernel[0], p.kernel[1], p.kernel[2]};
  check_cudnn(cudnnSetFilterNdDescriptor(plan.filter, type, CUDNN_TENSOR_NCHW, 2 + p.spatial, filter_dims),
              "cudnnSetFilterNdDescriptor", op, g);
  check_cudnn(cudnnSetConvolutionNdDescriptor(plan.conv, p.spatial, p.pad, p.stride, p.dilation,
                                              CUDNN_CROSS_CORRELATION, type),
              "cudnnSetConvolutionNdDescriptor", op, g);
  check_cudnn(cudnnSetConvolutionMathType(plan.conv, CUDNN_FMA_MATH), "cudnnSetConvolutionMathType", op, g);

  // cuDNN's idea of the output extents must be ours, or every index below would be wrong.
  int out_dims[5] = {0, 0, 1, 1, 1};
  check_cudnn(cudnnGetConvolutionNdForwardOutputDim(plan.conv, plan.x, plan.filter, 2 + p.spatial, out_dims),
              "cudnnGetConvolutionNdForwardOutputDim", op, g);
  for (int d = 0; d < p.spatial; ++d) {
    SHARDRT_CHECK(out_dims[2 + d] == p.y[d], CudaError, op, ": cuDNN computes output extent ", out_dims[2 + d],
                  " on axis ", d, " where ShardRT computes ", p.y[d], " (", geometry_str(op, g), ")");
  }

  // The heuristics rank the algorithms without running them (no benchmarking, no allocation, the same choice on
  // every run); the first acceptable one is taken, else the generic one that supports every problem.
  {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(handle, plan.x, plan.filter, plan.conv, plan.y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf),
                "cudnnGetConvolutionForwardAlgorithm_v7", op, g);
    plan.forward = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    for (int i = 0; i < n; ++i) {
      if (acceptable(type, perf[i].status, perf[i].determinism, perf[i].mathType)) {
        plan.forward = perf[i].algo;
        break;
      }
    }
    check_cudnn(cudnnGetConvolutionForwardWorkspaceSize(handle, plan.x, plan.filter, plan.conv, plan.y, plan.forward,
                                                        &plan.forward_bytes),
                "cudnnGetConvolutionForwardWorkspaceSize", op, g);
  }
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, plan.filter, plan.y, plan.conv, plan.x,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
                "cudnnGetConvolutionBackwardDataAlgorithm_v7", op, g);
    plan.backward_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;  // deterministic, supports every problem
    for (int i = 0; i < n; ++i) {
      if (acceptable(type, perf[i].status, perf[i].determinism, perf[i].mathType)) {
        plan.backward_data = perf[i].algo;
        break;
      }
    }
    check_cudnn(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, plan.filter, plan.y, plan.conv, plan.x,
                                                             plan.backward_data, &plan.backward_data_bytes),
                "cudnnGetConvolutionBackwardDataWorkspaceSize", op, g);
  }
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, plan.x, plan.y, plan.conv, plan.filter,
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
                "cudnnGetConvolutionBackwardFilterAlgorithm_v7", op, g);
    plan.backward_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;  // deterministic, supports every problem
    for (int i = 0; i < n; ++i) {
      if (acceptable(type, perf[i].status, perf[i].determinism, perf[i].mathType)) {
        plan.backward_filter = perf[i].algo;
        break;
      }
    }
    check_cudnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, plan.x, plan.y, plan.conv, plan.filter,
                                                               plan.backward_filter, &plan.backward_filter_bytes),
                "cudnnGetConvolutionBackwardFilterWorkspaceSize", op, g);
  }
  return plan;
}

using PlanKey = std::array<int, 32>;

PlanKey key_of(int device, cudnnDataType_t type, const Problem& p) {
  PlanKey k{};
  int i = 0;
  k[i++] = device;
  k[i++] = static_cast<int>(type);
  k[i++] = p.spatial;
  k[i++] = p.batch;
  k[i++] = p.c_x;
  k[i++] = p.c_y;
  for (int d = 0; d < 3; ++d) {
    k[i++] = p.x[d];
    k[i++] = p.y[d];
    k[i++] = p.kernel[d];
    k[i++] = p.stride[d];
    k[i++] = p.pad[d];
    k[i++] = p.dilation[d];
  }
  return k;
}

// The device's handle bound to `stream`, and the problem's cached plan; the caller holds `lock` while it enqueues.
struct Bound {
  cudnnHandle_t handle;
  const Plan* plan;
};

template <typename T>
Bound bind(const char* op, const ConvGeometry& g, bool transposed, cudaStream_t stream,
           std::unique_lock<std::mutex>& lock) {
  const Problem p = make_problem(op, g, transposed);
  const int device = current_device();
  DeviceDnn& dnn = dnn_for(device, op, g);
  lock = std::unique_lock<std::mutex>(dnn.mutex);
  check_cudnn(cudnnSetStream(dnn.handle, stream), "cudnnSetStream", op, g);
  // Plans live for the process, like the handles (never destroyed at exit); one per problem seen, which a
  // training run keeps to a handful.
  static auto* const plans = new std::map<PlanKey, Plan>();
  static std::mutex plans_mutex;
  const PlanKey key = key_of(device, kDataType<T>, p);
  std::lock_guard<std::mutex> guard(plans_mutex);
  auto it = plans->find(key);
  if (it == plans->end()) it = plans->emplace(key, make_plan<T>(dnn.handle, p, op, g)).first;
  return {dnn.handle, &it->second};
}

// Scratch for an algorithm's workspace, absent when it needs none.
struct Workspace {
  Workspace(std::size_t bytes, cudaStream_t stream) : bytes(bytes) {
    if (bytes > 0) scratch = std::make_unique<StreamScratch>(bytes, stream);
  }
  void* get() const { return scratch ? scratch->as<void>() : nullptr; }
  std::size_t bytes;
  std::unique_ptr<StreamScratch> scratch;
};

// cuDNN's alpha and beta: double for double data, float otherwise.
template <typename T>
struct Scale {
  T one = T(1), zero = T(0);
};

// cuDNN's forward: y_cudnn = conv(x_cudnn, w) (overwritten).
template <typename T>
void dnn_forward(const Bound& b, const T* x, const T* w, T* y, cudaStream_t stream, const char* op,
                 const ConvGeometry& g) {
  const Scale<T> s;
  Workspace ws(b.plan->forward_bytes, stream);
  check_cudnn(cudnnConvolutionForward(b.handle, &s.one, b.plan->x, x, b.plan->filter, w, b.plan->conv, b.plan->forward,
                                      ws.get(), ws.bytes, &s.zero, b.plan->y, y),
              "cudnnConvolutionForward", op, g);
}

// cuDNN's backward data: x_cudnn = conv^T(y_cudnn, w) (overwritten).
template <typename T>
void dnn_backward_data(const Bound& b, const T* w, const T* y, T* x, cudaStream_t stream, const char* op,
                       const ConvGeometry& g) {
  const Scale<T> s;
  Workspace ws(b.plan->backward_data_bytes, stream);
  check_cudnn(cudnnConvolutionBackwardData(b.handle, &s.one, b.plan->filter, w, b.plan->y, y, b.plan->conv,
                                           b.plan->backward_data, ws.get(), ws.bytes, &s.zero, b.plan->x, x),
              "cudnnConvolutionBackwardData", op, g);
}

// cuDNN's backward filter, accumulated: gw += correlation of x_cudnn with y_cudnn.
template <typename T>
void dnn_backward_filter(const Bound& b, const T* x, const T* y, T* gw, cudaStream_t stream, const char* op,
                         const ConvGeometry& g) {
  const Scale<T> s;
  Workspace ws(b.plan->backward_filter_bytes, stream);
  check_cudnn(cudnnConvolutionBackwardFilter(b.handle, &s.one, b.plan->x, x, b.plan->y, y, b.plan->conv,
                                             b.plan->backward_filter, ws.get(), ws.bytes, &s.one, b.plan->filter, gw),
              "cudnnConvolutionBackwardFilter", op, g);
}

// t += bias broadcast over batch and space; `on_y` says whether t is cuDNN's y (else its x).
template <typename T>
void add_bias(const Bound& b, bool on_y, const T* bias, T* t, const char* op, const ConvGeometry& g) {
  const Scale<T> s;
  check_cudnn(cudnnAddTensor(b.handle, &s.one, on_y ? b.plan->y_bias : b.plan->x_bias, bias, &s.one,
                             on_y ? b.plan->y : b.plan->x, t),
              "cudnnAddTensor", op, g);
}

// gbias += the sum of t over batch and space.
template <typename T>
void bias_grad(const Bound& b, bool on_y, const T* t, T* gbias, const char* op, const ConvGeometry& g) {
  const Scale<T> s;
  check_cudnn(cudnnConvolutionBackwardBias(b.handle, &s.one, on_y ? b.plan->y : b.plan->x, t, &s.one,
                                           on_y ? b.plan->y_bias : b.plan->x_bias, gbias),
              "cudnnConvolutionBackwardBias", op, g);
}

bool empty(const ConvGeometry& g) {
  return g.batch == 0 || g.c_in == 0 || g.c_out == 0 || g.in[0] * g.in[1] * g.in[2] == 0 ||
         g.out[0] * g.out[1] * g.out[2] == 0;
}

}  // namespace

template <typename T>
void conv_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y, cudaStream_t stream) {
  const char* op = "conv";
  if (empty(g)) return;
  std::unique_lock<std::mutex> lock;
  const Bound b = bind<T>(op, g, false, stream, lock);
  dnn_forward(b, x, w, y, stream, op, g);
  if (bias) add_bias(b, true, bias, y, op, g);
}

template <typename T>
void conv_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* gx, T* gw, T* gbias,
                   cudaStream_t stream) {
  const char* op = "conv";
  if (gx && empty(g)) {
    // No output reads the input: its grad is zero (and the parameter grads get nothing to add).
    const std::size_t n = static_cast<std::size_t>(g.batch * g.c_in * g.in[0] * g.in[1] * g.in[2]);
    if (n > 0) SHARDRT_CUDA_CHECK(cudaMemsetAsync(gx, 0, n * sizeof(T), stream));
  }
  if (empty(g) || (!gx && !gw && !gbias)) return;
  std::unique_lock<std::mutex> lock;
  const Bound b = bind<T>(op, g, false, stream, lock);
  if (gx) dnn_backward_data(b, w, gy, gx, stream, op, g);
  if (gw) dnn_backward_filter(b, x, gy, gw, stream, op, g);
  if (gbias) bias_grad(b, true, gy, gbias, op, g);
}

template <typename T>
void conv_transpose_patch_forward(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y,
                                  cudaStream_t stream) {
  const char* op = "conv_transpose";
  if (g.batch == 0 || g.c_in == 0 || g.c_out == 0 || g.in[0] * g.in[1] * g.in[2] == 0) return;
  std::unique_lock<std::mutex> lock;
  const Bound b = bind<T>(op, g, true, stream, lock);
  dnn_backward_data(b, w, x, y, stream, op, g);  // our y is cuDNN's x
  if (bias) add_bias(b, false, bias, y, op, g);
}

template <typename T>
void conv_transpose_patch_backward(const ConvGeometry& g, const T* x, const T* w, const T* gy, T* gx, T* gw,
                                   T* gbias, cudaStream_t stream) {
  const char* op = "conv_transpose";
  if (g.batch == 0 || g.c_in == 0 || g.c_out == 0 || g.in[0] * g.in[1] * g.in[2] == 0) return;
  if (!gx && !gw && !gbias) return;
  std::unique_lock<std::mutex> lock;
  const Bound b = bind<T>(op, g, true, stream, lock);
  if (gx) dnn_forward(b, gy, w, gx, stream, op, g);
  if (gw) dnn_backward_filter(b, gy, x, gw, stream, op, g);
  if (gbias) bias_grad(b, false, gy, gbias, op, g);
}

#define SHARDRT_INSTANTIATE_CONV(T)                                                                              \
  template void conv_forward<T>(const ConvGeometry&, const T*, const T*, const T*, T*, cudaStream_t);            \
  template void conv_backward<T>(const ConvGeometry&, const T*, const T*, const T*, T*, T*, T*, cudaStream_t);   \
  template void conv_transpose_patch_forward<T>(const ConvGeometry&, const T*, const T*, const T*, T*,            \
                                                cudaStream_t);                                                    \
  template void conv_transpose_patch_backward<T>(const ConvGeometry&, const T*, const T*, const T*, T*, T*, T*,  \
                                                 cudaStream_t);

SHARDRT_INSTANTIATE_CONV(float)
SHARDRT_INSTANTIATE_CONV(double)
#undef SHARDRT_INSTANTIATE_CONV

}  // namespace shardrt::kernels::cuda
