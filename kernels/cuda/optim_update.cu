// Fused optimizer updates: each element of the arenas is read once and written once per step (master weight,
// state, and the model's low-precision copy), instead of one pass per term. The arithmetic mirrors the CPU loops
// of optim/ term by term in T, so a device run tracks the CPU oracle to rounding.
#include "kernels/cuda/optim_update.h"

#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/half_io.cuh"
#include "kernels/cuda/launch.cuh"
#include "runtime/cuda/stream.h"
#include "runtime/cuda/stream_scratch.h"
#include "runtime/errors.h"

namespace shardrt::kernels::cuda {
namespace {

// Writes the updated master value into the model's copy, in its dtype.
template <typename T>
__device__ void write_copy(DType dtype, void* out, int64_t i, T value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(out)[i] = static_cast<float>(value); break;
    case DType::f64: static_cast<double*>(out)[i] = static_cast<double>(value); break;
    case DType::bf16: static_cast<bf16*>(out)[i] = store_as<bf16>(static_cast<float>(value)); break;
    case DType::f16: static_cast<f16*>(out)[i] = store_as<f16>(static_cast<float>(value)); break;
    default: break;  // rejected on the host
  }
}

void check_copy(const char* op, ParamCopy out) {
  if (!out.ptr) return;
  SHARDRT_CHECK(out.dtype == DType::f32 || out.dtype == DType::f64 || out.dtype == DType::bf16 ||
                    out.dtype == DType::f16,
                DTypeError, "kernels::cuda::", op, ": the parameter copy must be f32, f64, bf16 or f16, got ",
                dtype_name(out.dtype));
}

// The step's scalars, computed on the host exactly as optim/adamw.cpp computes them.
template <typename T>
struct AdamWScalars {
  T decay, b1, b2, step_size, sqrt_bc2, eps;
};

template <typename T>
__global__ void adamw_kernel(int64_t n, T* p, const T* g, T* m, T* v, AdamWScalars<T> s, DType copy_dtype,
                             void* copy) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    T pi = p[i] * s.decay;
    const T gi = g[i];
    const T mi = s.b1 * m[i] + (T(1) - s.b1) * gi;
    const T vi = s.b2 * v[i] + (T(1) - s.b2) * gi * gi;
    pi -= s.step_size * mi / (sqrt(vi) / s.sqrt_bc2 + s.eps);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (copy) write_copy(copy_dtype, copy, i, pi);
  }
}

template <typename T>
__global__ void sgd_kernel(int64_t n, T* p, const T* g, T* buf, T wd, T mu, T keep, T rate, bool with_momentum,
                           bool first, bool nesterov, DType copy_dtype, void* copy) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    T pi = p[i];
    T d = g[i] + wd * pi;
    if (with_momentum) {
      const T b = first ? d : mu * buf[i] + keep * d;
      buf[i] = b;
      d = nesterov ? d + mu * b : b;
    }
    pi -= rate * d;
    p[i] = pi;
    if (copy) write_copy(copy_dtype, copy, i, pi);
  }
}

// buf <- buf + (1 - mu) (g - buf); u <- nesterov ? g + mu (buf - g) : buf, u in f64 as the CPU's.
template <typename T>
__global__ void muon_momentum_kernel(int64_t n, const T* g, T* buf, T mu, bool nesterov, double* u) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const T b = buf[i] + (T(1) - mu) * (g[i] - buf[i]);
    buf[i] = b;
    u[i] = nesterov ? static_cast<double>(g[i] + mu * (b - g[i])) : static_cast<double>(b);
  }
}

// One block: x /= max(||x||_F, eps), the norm summed in a fixed order so reruns agree bit for bit. The norm
// stays on the device, so the step has no host synchronisation (and can be captured in a CUDA graph).
__global__ void normalise_kernel(int64_t n, double* x, double eps) {
  double local = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) local += x[i] * x[i];
  const double total = block_allreduce(local, 0.0, Add<double>{});
  const double norm = fmax(sqrt(total), eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] /= norm;
}

template <typename T>
__global__ void muon_apply_kernel(int64_t n, T* p, const double* o, T decay, double step_size, DType copy_dtype,
                                  void* copy) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const T pi = static_cast<T>(static_cast<double>(p[i] * decay) - step_size * o[i]);
    p[i] = pi;
    if (copy) write_copy(copy_dtype, copy, i, pi);
  }
}

// Newton–Schulz on x (rows x cols, row-major, f64), in place. The CPU works on the wide orientation X (m <= n,
// X = xᵀ for a tall x); here a tall x is never transposed: with U = x = Xᵀ, X Xᵀ = Uᵀ U and
// (a X + B X)ᵀ = a U + U Bᵀ, which are the same GEMMs with transpose flags.
void newton_schulz_f64(double* x, int64_t rows, int64_t cols, const MuonHyper& h, cudaStream_t stream) {
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  normalise_kernel<<<1, 1024, 0, stream>>>(rows * cols, x, h.eps);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
  StreamScratch a(sizeof(double) * m * m, stream), b(sizeof(double) * m * m, stream), y(sizeof(double) * m * n, stream);
  double *A = a.as<double>(), *B = b.as<double>(), *Y = y.as<double>(), *X = x;
  for (int s = 0; s < h.ns_steps; ++s) {
    if (tall) gemm(DType::f64, true, false, m, m, n, 1.0, X, m, X, m, 0.0, A, m, stream);  // Uᵀ U
    else gemm(DType::f64, false, true, m, m, n, 1.0, X, n, X, n, 0.0, A, m, stream);        // X Xᵀ
    SHARDRT_CUDA_CHECK(cudaMemcpyAsync(B, A, sizeof(double) * m * m, cudaMemcpyDeviceToDevice, stream));
    gemm(DType::f64, false, false, m, m, m, h.c, A, m, A, m, h.b, B, m, stream);  // B = b A + c A A
    SHARDRT_CUDA_CHECK(cudaMemcpyAsync(Y, X, sizeof(double) * m * n, cudaMemcpyDeviceToDevice, stream));
    if (tall) gemm(DType::f64, false, true, n, m, m, 1.0, X, m, B, m, h.a, Y, m, stream);  // a U + U Bᵀ
    else gemm(DType::f64, false, false, m, n, m, 1.0, B, m, X, n, h.a, Y, n, stream);      // a X + B X
    SHARDRT_CUDA_CHECK(cudaMemcpyAsync(X, Y, sizeof(double) * m * n, cudaMemcpyDeviceToDevice, stream));
  }
}

}  // namespace

template <typename T>
void adamw_update(int64_t n, T* p, const T* g, T* m, T* v, const AdamWHyper& h, ParamCopy out, cudaStream_t stream) {
  check_copy("adamw_update", out);
  if (n == 0) return;
  const double t = static_cast<double>(h.step);
  const AdamWScalars<T> s{static_cast<T>(1 - h.lr * h.weight_decay), static_cast<T>(h.beta1),
                          static_cast<T>(h.beta2),        static_cast<T>(h.lr / (1 - std::pow(h.beta1, t))),
                          static_cast<T>(std::sqrt(1 - std::pow(h.beta2, t))), static_cast<T>(h.eps)};
  adamw_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(n, p, g, m, v, s, out.dtype, out.ptr);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void sgd_update(int64_t n, T* p, const T* g, T* buf, const SGDHyper& h, ParamCopy out, cudaStream_t stream) {
  check_copy("sgd_update", out);
  if (n == 0) return;
  sgd_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      n, p, g, buf, static_cast<T>(h.weight_decay), static_cast<T>(h.momentum), static_cast<T>(1 - h.dampening),
      static_cast<T>(h.lr), h.momentum != 0, h.step == 1, h.nesterov, out.dtype, out.ptr);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void muon_update(int64_t rows, int64_t cols, T* p, const T* g, T* buf, const MuonHyper& h, ParamCopy out,
                 cudaStream_t stream) {
  check_copy("muon_update", out);
  const int64_t n = rows * cols;
  if (n == 0) return;
  StreamScratch u(sizeof(double) * n, stream);
  muon_momentum_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(n, g, buf, static_cast<T>(h.momentum),
                                                                            h.nesterov, u.as<double>());
  SHARDRT_CUDA_CHECK(cudaGetLastError());
  newton_schulz_f64(u.as<double>(), rows, cols, h, stream);
  muon_apply_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      n, p, u.as<double>(), static_cast<T>(1 - h.lr * h.weight_decay), h.step_size, out.dtype, out.ptr);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template void adamw_update<float>(int64_t, float*, const float*, float*, float*, const AdamWHyper&, ParamCopy,
                                  CudaStream);
template void adamw_update<double>(int64_t, double*, const double*, double*, double*, const AdamWHyper&, ParamCopy,
                                   CudaStream);
template void sgd_update<float>(int64_t, float*, const float*, float*, const SGDHyper&, ParamCopy, CudaStream);
template void sgd_update<double>(int64_t, double*, const double*, double*, const SGDHyper&, ParamCopy, CudaStream);
template void muon_update<float>(int64_t, int64_t, float*, const float*, float*, const MuonHyper&, ParamCopy,
                                 CudaStream);
template void muon_update<double>(int64_t, int64_t, double*, const double*, double*, const MuonHyper&, ParamCopy,
                                  CudaStream);

}  // namespace shardrt::kernels::cuda
