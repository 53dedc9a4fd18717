// Softmax and log-softmax over the middle axis of an (outer, n, inner) contiguous view, max-shifted so large
// inputs do not overflow. As in PyTorch, a slice that is entirely -inf (or holds +inf or NaN) gives NaN.
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu {

// y[o, k, j] = exp(x[o, k, j]) / sum_k' exp(x[o, k', j]). y may alias x.
template <typename T>
void softmax(int64_t outer, int64_t n, int64_t inner, const T* x, T* y);

// gx = y * (gy - sum_k gy * y), from the forward output y. gx may alias gy.
template <typename T>
void softmax_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx);

// y = x - log sum_k exp(x). y may alias x.
template <typename T>
void log_softmax(int64_t outer, int64_t n, int64_t inner, const T* x, T* y);

// gx = gy - exp(y) * sum_k gy, from the forward output y. gx may alias gy.
template <typename T>
void log_softmax_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx);

}  // namespace shardrt::kernels::cpu
