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

// One element of AdamW; shared by the host-scalar and the device-scalar kernels so the two agree bit for bit.
template <typename T>
__device__ void adamw_element(int64_t i, T* p, const T* g, T* m, T* v, const AdamWScalars<T>& s, DType copy_dtype,
                              void* copy) {
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

template <typename T>
__global__ void adamw_kernel(int64_t n, T* p, const T* g, T* m, T* v, AdamWScalars<T> s, DType copy_dtype,
                             void* copy) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) adamw_element(i, p, g, m, v, s, copy_dtype, copy);
}

// The step's scalars come from device memory (advance_step), rounded to T exactly as the host path rounds them.
template <typename T>
__global__ void adamw_scheduled_kernel(int64_t n, T* p, const T* g, T* m, T* v, T b1, T b2, T eps,
                                       const DeviceStepScalars* d, DType copy_dtype, void* copy) {
  const AdamWScalars<T> s{static_cast<T>(d->adamw_decay), b1, b2, static_cast<T>(d->adamw_step_size),
                          static_cast<T>(d->adamw_sqrt_bc2), eps};
  for (int64_t i = first_index(); i < n; i += grid_stride()) adamw_element(i, p, g, m, v, s, copy_dtype, copy);
}

template <typename T>
__device__ void sgd_element(int64_t i, T* p, const T* g, T* buf, T wd, T mu, T keep, T rate, bool with_momentum,
                            bool first, bool nesterov, DType copy_dtype, void* copy) {
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

template <typename T>
__global__ void sgd_kernel(int64_t n, T* p, const T* g, T* buf, T wd, T mu, T keep, T rate, bool with_momentum,
                           bool first, bool nesterov, DType copy_dtype, void* copy) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    sgd_element(i, p, g, buf, wd, mu, keep, rate, with_momentum, first, nesterov, copy_dtype, copy);
}

template <typename T>
__global__ void sgd_scheduled_kernel(int64_t n, T* p, const T* g, T* buf, T wd, T mu, T keep, bool with_momentum,
                                     bool nesterov, const DeviceStepScalars* d, DType copy_dtype, void* copy) {
  const T rate = static_cast<T>(d->sgd_lr);
  const bool first = d->step == 1;
  for (int64_t i = first_index(); i < n; i += grid_stride())
    sgd_element(i, p, g, buf, wd, mu, keep, rate, with_momentum, first, nesterov, copy_dtype, copy);
}

__global__ void advance_step_kernel(DeviceStepScalars* s, const double* factors, int64_t n_factors,
                                    int64_t first_step, double host_factor, StepRules r) {
  double factor = host_factor;
  if (factors) {
    const int64_t at = s->step - first_step;
    if (at >= 0 && at < n_factors) {
      factor = factors[at];
    } else {
      factor = 0;  // the step does not move the weights; the host reads `overrun` and reports it
      s->overrun = 1;
    }
  }
  s->step += 1;
  const double t = static_cast<double>(s->step);
  s->factor = factor;
  const double lr = r.adamw_lr * factor;
  s->adamw_lr = lr;
  s->adamw_decay = 1 - lr * r.adamw_weight_decay;
  s->adamw_step_size = lr / (1 - pow(r.beta1, t));
  s->adamw_sqrt_bc2 = sqrt(1 - pow(r.beta2, t));
  s->sgd_lr = r.sgd_lr * factor;
  s->muon_lr = r.muon_lr * factor;
}

// Block b sums x^2 over elements b, b + kSquarePartials, ... of each thread's stride: a fixed assignment, so the
// partial sums depend on n alone.
template <typename T>
__global__ void square_partials_kernel(int64_t n, const T* x, double* partials) {
  double local = 0;
  const int64_t stride = int64_t{kSquarePartials} * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    const double xi = static_cast<double>(x[i]);
    local += xi * xi;
  }
  const double total = block_allreduce(local, 0.0, Add<double>{});
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void add_partials_kernel(const double* partials, double* acc) {
  double local = 0;
  for (int i = threadIdx.x; i < kSquarePartials; i += blockDim.x) local += partials[i];
  const double total = block_allreduce(local, 0.0, Add<double>{});
  if (threadIdx.x == 0) *acc += total;
}

__global__ void clip_coefficient_kernel(const double* sq, double max_norm, double* norm, double* coef) {
  const double total = sqrt(*sq);
  *norm = total;
  *coef = fmin(1.0, max_norm / (total + 1e-6));
}

template <typename T>
__global__ void scale_kernel(int64_t n, T* x, const double* coef, double host_scale) {
  const T f = static_cast<T>(coef ? *coef : host_scale);
  for (int64_t i = first_index(); i < n; i += grid_stride()) x[i] *= f;
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

void advance_step(DeviceStepScalars* s, const double* factors, int64_t n_factors, int64_t first_step,
                  double host_factor, const StepRules& rules, cudaStream_t stream) {
  SHARDRT_CHECK(s, ValueError, "kernels::cuda::advance_step: no step scalars");
  advance_step_kernel<<<1, 1, 0, stream>>>(s, factors, n_factors, first_step, host_factor, rules);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void adamw_update_scheduled(int64_t n, T* p, const T* g, T* m, T* v, const AdamWHyper& h,
                            const DeviceStepScalars* s, ParamCopy out, cudaStream_t stream) {
  check_copy("adamw_update_scheduled", out);
  if (n == 0) return;
  adamw_scheduled_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      n, p, g, m, v, static_cast<T>(h.beta1), static_cast<T>(h.beta2), static_cast<T>(h.eps), s, out.dtype,
      out.ptr);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void sgd_update_scheduled(int64_t n, T* p, const T* g, T* buf, const SGDHyper& h, const DeviceStepScalars* s,
                          ParamCopy out, cudaStream_t stream) {
  check_copy("sgd_update_scheduled", out);
  if (n == 0) return;
  sgd_scheduled_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      n, p, g, buf, static_cast<T>(h.weight_decay), static_cast<T>(h.momentum), static_cast<T>(1 - h.dampening),
      h.momentum != 0, h.nesterov, s, out.dtype, out.ptr);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void sum_squares_add(int64_t n, const T* x, double* partials, double* acc, cudaStream_t stream) {
  if (n == 0) return;
  square_partials_kernel<T><<<kSquarePartials, kThreads, 0, stream>>>(n, x, partials);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
  add_partials_kernel<<<1, kThreads, 0, stream>>>(partials, acc);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

void clip_coefficient(const double* sq, double max_norm, double* norm, double* coef, cudaStream_t stream) {
  clip_coefficient_kernel<<<1, 1, 0, stream>>>(sq, max_norm, norm, coef);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void scale_by(int64_t n, T* x, const double* coef, double host_scale, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(n, x, coef, host_scale);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

#define SHARDRT_INSTANTIATE_SCHEDULED(T)                                                                          \
  template void adamw_update_scheduled<T>(int64_t, T*, const T*, T*, T*, const AdamWHyper&,                     \
                                          const DeviceStepScalars*, ParamCopy, cudaStream_t);                   \
  template void sgd_update_scheduled<T>(int64_t, T*, const T*, T*, const SGDHyper&, const DeviceStepScalars*,   \
                                        ParamCopy, cudaStream_t);                                               \
  template void sum_squares_add<T>(int64_t, const T*, double*, double*, cudaStream_t);                          \
  template void scale_by<T>(int64_t, T*, const double*, double, cudaStream_t);
SHARDRT_INSTANTIATE_SCHEDULED(float)
SHARDRT_INSTANTIATE_SCHEDULED(double)
#undef SHARDRT_INSTANTIATE_SCHEDULED

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
