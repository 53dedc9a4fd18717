// Scaled dot-product attention with a log-sum-exp output on a CUDA device, tile by tile with an online softmax,
// so the Nq × Nk score matrix never exists (device memory beyond the outputs: BH·Nq accumulator scalars in the
// backward).
// Contract: kernels/cpu/attention.h (same shapes, scale, Nk == 0 and merge rules; grad_lse may be nullptr).
// CUDA: T in {float, double, bf16, f16}; scores, softmax statistics and all sums are in AccumT<T> (double for
// double, float otherwise), and lse / lse_b are AccumT<T> too, so a 16-bit run keeps an f32 log-sum-exp for the
// ring merge. Any D and Dv whose tiles fit the device's shared memory (every head dim up to 256 in f32, odd ones
// included); larger throws ShapeError. The backward is deterministic (no atomics: dK/dV and dQ are two kernels,
// each recomputing the probabilities). Device pointers on the device that owns `stream`; queued on `stream`,
// never synchronises.
#pragma once
#include <cstdint>
#include <type_traits>

#include "runtime/cuda_context.h"
#include "runtime/half.h"

namespace shardrt::kernels::cuda {

template <typename T>
using AccumT = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void attention_forward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, AccumT<T> scale, const T* q,
                       const T* k, const T* v, T* out, AccumT<T>* lse, CudaStream stream);

template <typename T>
void attention_backward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, AccumT<T> scale, const T* q,
                        const T* k, const T* v, const T* out, const AccumT<T>* lse, const T* grad_out,
                        const AccumT<T>* grad_lse, T* grad_q, T* grad_k, T* grad_v, CudaStream stream);

template <typename T>
void attention_merge(int64_t rows, int64_t Dv, T* acc, AccumT<T>* lse, const T* out_b, const AccumT<T>* lse_b,
                     CudaStream stream);

}  // namespace shardrt::kernels::cuda
