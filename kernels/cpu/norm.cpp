#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/norm_simd.h"

namespace shardrt::kernels::cpu {
namespace {

// Calls with fewer elements than this stay on one thread.
constexpr int64_t kParallelMin = int64_t{1} << 15;
// Upper bound on the row chunks of layernorm_backward, which bounds its partial-sum buffer to kMaxChunks * 2 * D.
constexpr int64_t kMaxChunks = 64;

struct Moments {
  double mean;
  double rstd;
};

// Two-pass mean and 1/sqrt(biased variance + eps) of m contiguous values.
template <typename T>
Moments moments(const T* x, int64_t m, T eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < m; ++i) sum += static_cast<double>(x[i]);
  const double mean = sum / static_cast<double>(m);
  double sq = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    sq += d * d;
  }
  return {mean, 1.0 / std::sqrt(sq / static_cast<double>(m) + static_cast<double>(eps))};
}

// The double partial sums of layernorm_backward's parameter grads, kept per thread between calls: a fresh buffer
// each call (tens to hundreds of KiB, past malloc's mmap threshold) cost page faults on every backward.
std::vector<double>& layernorm_partials(size_t size) {
  thread_local std::vector<double> partial;
  partial.assign(size, 0.0);
  return partial;
}

}  // namespace

// float runs in vector lanes (kernels/cpu/norm_simd.cpp, with its own answer to accuracy far from zero); double
// stays the scalar two-pass reference below.
template <typename T>
void layernorm(int64_t rows, int64_t D, const T* x, const T* weight, const T* bias, T eps, T* y, T* mean, T* rstd) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t rows_per_task = std::max<int64_t>(1, kParallelMin / 4 / std::max<int64_t>(D, 1));
    const int64_t tasks = (rows + rows_per_task - 1) / rows_per_task;
#pragma omp parallel for if (rows * D >= kParallelMin) schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      simd::layernorm_rows(t * rows_per_task, std::min(rows, (t + 1) * rows_per_task), D, x, weight, bias, eps, y,
                           mean, rstd);
    }
    return;
  }
#pragma omp parallel for if (rows * D >= kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    const Moments st = moments(xr, D, eps);
    mean[r] = static_cast<T>(st.mean);
    rstd[r] = static_cast<T>(st.rstd);
    // xhat in double: a float mean of data far from zero (x ~ 1e4) is off by half an ulp of 1e4, which would be a
    // large error on the deviations x - mean.
    for (int64_t j = 0; j < D; ++j) {
      const double xhat = (static_cast<double>(xr[j]) - st.mean) * st.rstd;
      yr[j] = static_cast<T>((weight ? xhat * static_cast<double>(weight[j]) : xhat) +
                             (bias ? static_cast<double>(bias[j]) : 0.0));
    }
  }
}

template <typename T>
void layernorm_backward(int64_t rows, int64_t D, const T* x, const T* weight, const T* mean, const T* rstd,
                        const T* gy, T* gx, T* gweight, T* gbias) {
  if (rows == 0 || D == 0) return;
  const bool param_grads = gweight || gbias;
  // Rows are cut into chunks by shape alone; each chunk sums its parameter grads into its own partials, which are
  // then added in chunk order. That keeps the result independent of the thread count.
  const int64_t chunks = std::clamp<int64_t>(rows * D / kParallelMin, 1, std::min(rows, kMaxChunks));
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  std::vector<double>& partial = layernorm_partials(param_grads ? chunks * 2 * D : 0);

#pragma omp parallel for if (chunks > 1) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double* part_w = param_grads ? partial.data() + c * 2 * D : nullptr;
    double* part_b = param_grads ? part_w + D : nullptr;
    const int64_t r_end = std::min(rows, (c + 1) * rows_per_chunk);
    if constexpr (std::is_same_v<T, float>) {
      simd::layernorm_backward_rows(c * rows_per_chunk, r_end, D, x, weight, mean, rstd, gy, gx, part_w, part_b);
      continue;
    }
    for (int64_t r = c * rows_per_chunk; r < r_end; ++r) {
      const T* xr = x + r * D;
      const T* gyr = gy + r * D;
      const T mu = mean[r];
      const T rs = rstd[r];
      if (param_grads) {
        for (int64_t j = 0; j < D; ++j) {
          part_w[j] += static_cast<double>(gyr[j] * ((xr[j] - mu) * rs));
          part_b[j] += static_cast<double>(gyr[j]);
        }
      }
      if (!gx) continue;
      // gx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = gy * weight, the grad w.r.t. xhat.
      double sum_g = 0.0;
      double sum_g_xhat = 0.0;
      for (int64_t j = 0; j < D; ++j) {
        const T g = weight ? gyr[j] * weight[j] : gyr[j];
        sum_g += static_cast<double>(g);
        sum_g_xhat += static_cast<double>(g * ((xr[j] - mu) * rs));
      }
      const T mean_g = static_cast<T>(sum_g / static_cast<double>(D));
      const T mean_g_xhat = static_cast<T>(sum_g_xhat / static_cast<double>(D));
      T* gxr = gx + r * D;
      for (int64_t j = 0; j < D; ++j) {
        const T g = weight ? gyr[j] * weight[j] : gyr[j];
        gxr[j] = rs * (g - mean_g - (xr[j] - mu) * rs * mean_g_xhat);
      }
    }
  }

  if (!param_grads) return;
  for (int64_t j = 0; j < D; ++j) {
    double sum_w = 0.0;
    double sum_b = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      sum_w += partial[c * 2 * D + j];
      sum_b += partial[c * 2 * D + D + j];
    }
    if (gweight) gweight[j] += static_cast<T>(sum_w);
    if (gbias) gbias[j] += static_cast<T>(sum_b);
  }
}

template <typename T>
void groupnorm(int64_t N, int64_t C, int64_t S, int64_t G, const T* x, const T* weight, const T* bias, T eps, T* y,
               T* mean, T* rstd) {
  const int64_t channels_per_group = C / G;
  const int64_t group_size = channels_per_group * S;
#pragma omp parallel for if (N * C * S >= kParallelMin) schedule(static)
  for (int64_t ng = 0; ng < N * G; ++ng) {
    // Sample n, group g is one contiguous block because channels of a group are consecutive.
    const int64_t offset = ng * group_size;
    const Moments st = moments(x + offset, group_size, eps);
    mean[ng] = static_cast<T>(st.mean);
    rstd[ng] = static_cast<T>(st.rstd);
    const int64_t c0 = (ng % G) * channels_per_group;
    for (int64_t ci = 0; ci < channels_per_group; ++ci) {
      const int64_t c = c0 + ci;
      const T* xc = x + offset + ci * S;
      T* yc = y + offset + ci * S;
      // Folded per channel, in double for the same reason as in layernorm: y = x * scale + shift.
      const double scale = st.rstd * (weight ? static_cast<double>(weight[c]) : 1.0);
      const double shift = (bias ? static_cast<double>(bias[c]) : 0.0) - st.mean * scale;
      for (int64_t s = 0; s < S; ++s) yc[s] = static_cast<T>(static_cast<double>(xc[s]) * scale + shift);
    }
  }
}

template <typename T>
void groupnorm_backward(int64_t N, int64_t C, int64_t S, int64_t G, const T* x, const T* weight, const T* mean,
                        const T* rstd, const T* gy, T* gx, T* gweight, T* gbias) {
  const int64_t channels_per_group = C / G;
  const int64_t group_size = channels_per_group * S;
  const bool param_grads = gweight || gbias;
  // Per-(sample, channel) parameter-grad partials, reduced over samples in order afterwards for determinism.
  std::vector<double> partial(param_grads ? N * C * 2 : 0, 0.0);

#pragma omp parallel for if (N * C * S >= kParallelMin) schedule(static)
  for (int64_t ng = 0; ng < N * G; ++ng) {
    const int64_t n = ng / G;
    const int64_t c0 = (ng % G) * channels_per_group;
    const int64_t offset = ng * group_size;
    const T mu = mean[ng];
    const T rs = rstd[ng];
    double sum_g = 0.0;
    double sum_g_xhat = 0.0;
    for (int64_t ci = 0; ci < channels_per_group; ++ci) {
      const int64_t c = c0 + ci;
      const T* xc = x + offset + ci * S;
      const T* gyc = gy + offset + ci * S;
      const T w = weight ? weight[c] : T(1);
      double dot_gy_xhat = 0.0;
      double sum_gy = 0.0;
      for (int64_t s = 0; s < S; ++s) {
        const T xhat = (xc[s] - mu) * rs;
        dot_gy_xhat += static_cast<double>(gyc[s] * xhat);
        sum_gy += static_cast<double>(gyc[s]);
      }
      // g = gy * w is constant-scaled within a channel, so its sums follow from the gy sums.
      sum_g += static_cast<double>(w) * sum_gy;
      sum_g_xhat += static_cast<double>(w) * dot_gy_xhat;
      if (param_grads) {
        partial[(n * C + c) * 2] = dot_gy_xhat;
        partial[(n * C + c) * 2 + 1] = sum_gy;
      }
    }
    if (!gx) continue;
    const T mean_g = static_cast<T>(sum_g / static_cast<double>(group_size));
    const T mean_g_xhat = static_cast<T>(sum_g_xhat / static_cast<double>(group_size));
    for (int64_t ci = 0; ci < channels_per_group; ++ci) {
      const int64_t c = c0 + ci;
      const T* xc = x + offset + ci * S;
      const T* gyc = gy + offset + ci * S;
      T* gxc = gx + offset + ci * S;
      const T w = weight ? weight[c] : T(1);
      for (int64_t s = 0; s < S; ++s) gxc[s] = rs * (gyc[s] * w - mean_g - (xc[s] - mu) * rs * mean_g_xhat);
    }
  }

  if (!param_grads) return;
  for (int64_t c = 0; c < C; ++c) {
    double sum_w = 0.0;
    double sum_b = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      sum_w += partial[(n * C + c) * 2];
      sum_b += partial[(n * C + c) * 2 + 1];
    }
    if (gweight) gweight[c] += static_cast<T>(sum_w);
    if (gbias) gbias[c] += static_cast<T>(sum_b);
  }
}

#define SHARDRT_INSTANTIATE_NORM(T)                                                                            \
  template void layernorm<T>(int64_t, int64_t, const T*, const T*, const T*, T, T*, T*, T*);                   \
  template void layernorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*,   \
                                      T*, T*);                                                                 \
  template void groupnorm<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*, const T*, T, T*, T*, T*); \
  template void groupnorm_backward<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*, const T*,        \
                                      const T*, const T*, T*, T*, T*);

SHARDRT_INSTANTIATE_NORM(float)
SHARDRT_INSTANTIATE_NORM(double)
#undef SHARDRT_INSTANTIATE_NORM

}  // namespace shardrt::kernels::cpu
