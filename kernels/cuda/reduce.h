// Reductions over the middle axis of an (outer, n, inner) contiguous view on a CUDA device; outputs are
// (outer, inner) contiguous. The CUDA twin of kernels/cpu/reduce.h, with the same NaN, tie and empty-row rules.
// Sums accumulate in double for both float and double. Results are deterministic: every output is reduced in an
// order fixed by the shape alone (no atomics). Templates over T in {float, double}; each call is queued on
// `stream` without synchronising, with device pointers on the device that owns `stream`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace shardrt::kernels::cuda {

// y[o, j] = sum_k x[o, k, j]. n == 0 gives 0.
template <typename T>
void reduce_sum(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t stream);

// y[o, j] = sum_k x[o, k, j] / n. n == 0 gives NaN.
template <typename T>
void reduce_mean(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t stream);

// y = max (min) over k and idx = the k where it is reached: the first one on ties, the first NaN if any (NaN
// propagates, as in PyTorch). Precondition: n >= 1 (with n == 0 nothing is written).
template <typename T>
void reduce_max(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx, cudaStream_t stream);
template <typename T>
void reduce_min(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx, cudaStream_t stream);

// idx = the index reduce_max would write. Precondition: n >= 1.
template <typename T>
void reduce_argmax(int64_t outer, int64_t n, int64_t inner, const T* x, int64_t* idx, cudaStream_t stream);

// y = log sum_k exp(x[o, k, j]), shifted by the maximum. A row that is all -inf (or n == 0) gives -inf; a row
// holding +inf gives +inf; a NaN gives NaN.
template <typename T>
void reduce_logsumexp(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, cudaStream_t stream);

// gx[o, k, j] = gy[o, j].
template <typename T>
void reduce_sum_backward(int64_t outer, int64_t n, int64_t inner, const T* gy, T* gx, cudaStream_t stream);

// gx[o, k, j] = gy[o, j] / n.
template <typename T>
void reduce_mean_backward(int64_t outer, int64_t n, int64_t inner, const T* gy, T* gx, cudaStream_t stream);

// Backward of reduce_max / reduce_min: gx is overwritten with zeros except gx[o, idx[o, j], j] = gy[o, j].
template <typename T>
void reduce_index_backward(int64_t outer, int64_t n, int64_t inner, const int64_t* idx, const T* gy, T* gx,
                           cudaStream_t stream);

// gx[o, k, j] = gy[o, j] * exp(x[o, k, j] - y[o, j]), with y from reduce_logsumexp. Where y is -inf (every input
// -inf) gx is 0 rather than NaN.
template <typename T>
void reduce_logsumexp_backward(int64_t outer, int64_t n, int64_t inner, const T* x, const T* y, const T* gy, T* gx,
                               cudaStream_t stream);

}  // namespace shardrt::kernels::cuda
