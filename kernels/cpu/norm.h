// Layer normalisation and group normalisation, forward and backward. Statistics use the biased variance, computed
// in two passes (mean first, then the mean squared deviation) in double, never as E[x^2] - E[x]^2.
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu {

// Normalises each of `rows` contiguous rows of length D: y = (x - mean) * rstd * weight + bias, with
// rstd = 1 / sqrt(var + eps). weight and bias (length D) may each be null (scale 1, shift 0). Writes the
// per-row mean and rstd (length rows) for the backward. Precondition: D >= 1.
template <typename T>
void layernorm(int64_t rows, int64_t D, const T* x, const T* weight, const T* bias, T eps, T* y, T* mean, T* rstd);

// Backward of layernorm from its saved mean and rstd. gx (rows x D) is overwritten; it may be null when the input
// needs no grad. gweight and gbias (length D) are accumulated with += (the caller zero-fills them the first time)
// and may each be null. The parameter grads are summed over fixed row chunks that depend only on the shape, so
// they are bitwise identical for any thread count.
template <typename T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* weight, const T* mean, const T* rstd,
                        const T* gy, T* gx, T* gweight, T* gbias);

// Group normalisation of x (N, C, S), S being the flattened spatial size: channels are split into G groups of C/G
// consecutive channels and each (sample, group) block of (C/G) * S elements is normalised, then
// y = xhat * weight[c] + bias[c]. weight and bias (length C) may each be null. Writes mean and rstd of shape
// (N, G). Preconditions: G >= 1, C % G == 0, (C/G) * S >= 1.
template <typename T>
void groupnorm(int64_t N, int64_t C, int64_t S, int64_t G, const T* x, const T* weight, const T* bias, T eps, T* y,
               T* mean, T* rstd);

// Backward of groupnorm; same conventions as layernorm_backward (gx overwritten or null; gweight, gbias of length
// C accumulated with += or null; deterministic for any thread count).
template <typename T>
void groupnorm_backward(int64_t N, int64_t C, int64_t S, int64_t G, const T* x, const T* weight, const T* mean,
                        const T* rstd, const T* gy, T* gx, T* gweight, T* gbias);

}  // namespace shardrt::kernels::cpu
