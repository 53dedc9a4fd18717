#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/column_blocks.h"

namespace shardrt::kernels::cpu {
namespace {

// Sum of a contiguous row in double. Eight independent partial sums break the add latency chain (and are combined
// in a fixed order, so the result is reproducible).
template <typename T>
double sum_row(const T* x, int64_t n) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(x[i + l]);
  }
  double total = 0.0;
  for (; i < n; ++i) total += static_cast<double>(x[i]);
  for (int l = 0; l < kLanes; ++l) total += lane[l];
  return total;
}

// y[o, j] = scale * sum_k x[o, k, j], accumulated in double.
template <typename T>
void scaled_sum(int64_t outer, int64_t n, int64_t inner, const T* x, double scale, T* y) {
  if (inner == 1) {
#pragma omp parallel for if (outer * n >= kColumnParallelMin) schedule(static)
    for (int64_t o = 0; o < outer; ++o) y[o] = static_cast<T>(sum_row(x + o * n, n) * scale);
    return;
  }
  for_each_column_block(outer, n, inner, [&](int64_t o, int64_t j0, int64_t j1) {
    double acc[kInnerBlock];
    const int64_t len = j1 - j0;
    std::fill(acc, acc + len, 0.0);
    for (int64_t k = 0; k < n; ++k) {
      const T* row = x + (o * n + k) * inner + j0;
      for (int64_t j = 0; j < len; ++j) acc[j] += static_cast<double>(row[j]);
    }
    for (int64_t j = 0; j < len; ++j) y[o * inner + j0 + j] = static_cast<T>(acc[j] * scale);
  });
}

// Does v replace the running best? Strictly better keeps the first index on ties; a NaN replaces any non-NaN and
// is never replaced, so the first NaN wins.
template <typename T, bool Max>
bool replaces(T v, T best) {
  if constexpr (Max) {
    return v > best || (std::isnan(v) && !std::isnan(best));
  } else {
    return v < best || (std::isnan(v) && !std::isnan(best));
  }
}

// Max or min with its index; y may be null (argmax only).
template <typename T, bool Max>
void reduce_extreme(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx) {
  for_each_column_block(outer, n, inner, [&](int64_t o, int64_t j0, int64_t j1) {
    T best[kInnerBlock];
    int64_t arg[kInnerBlock];
    const int64_t len = j1 - j0;
    const T* first = x + o * n * inner + j0;
    for (int64_t j = 0; j < len; ++j) {
      best[j] = first[j];
      arg[j] = 0;
    }
    for (int64_t k = 1; k < n; ++k) {
      const T* row = x + (o * n + k) * inner + j0;
      for (int64_t j = 0; j < len; ++j) {
        if (replaces<T, Max>(row[j], best[j])) {
          best[j] = row[j];
          arg[j] = k;
        }
      }
    }
    for (int64_t j = 0; j < len; ++j) {
      if (y) y[o * inner + j0 + j] = best[j];
      idx[o * inner + j0 + j] = arg[j];
    }
  });
}

}  // namespace

template <typename T>
void reduce_sum(int64_t outer, int64_t n, int64_t inner, const T* x, T* y) {
  scaled_sum(outer, n, inner, x, 1.0, y);
}

template <typename T>
void reduce_mean(int64_t outer, int64_t n, int64_t inner, const T* x, T* y) {
  // 1/0 = inf times the empty sum 0 gives the NaN that the mean of nothing should be.
  scaled_sum(outer, n, inner, x, 1.0 / static_cast<double>(n), y);
}

template <typename T>
void reduce_max(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx) {
  reduce_extreme<T, true>(outer, n, inner, x, y, idx);
}

template <typename T>
void reduce_min(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* idx) {
  reduce_extreme<T, false>(outer, n, inner, x, y, idx);
}

template <typename T>
void reduce_argmax(int64_t outer, int64_t n, int64_t inner, const T* x, int64_t* idx) {
  reduce_extreme<T, true>(outer, n, inner, x, nullptr, idx);
}

template <typename T>
void reduce_logsumexp(int64_t outer, int64_t n, int64_t inner, const T* x, T* y) {
  for_each_column_block(outer, n, inner, [&](int64_t o, int64_t j0, int64_t j1) {
    T shift[kInnerBlock];
    double acc[kInnerBlock];
    const int64_t len = j1 - j0;
    std::fill(shift, shift + len, -std::numeric_limits<T>::infinity());
    std::fill(acc, acc + len, 0.0);
    for (int64_t k = 0; k < n; ++k) {
      const T* row = x + (o * n + k) * inner + j0;
      for (int64_t j = 0; j < len; ++j) {
        if (replaces<T, true>(row[j], shift[j])) shift[j] = row[j];
      }
    }
    for (int64_t k = 0; k < n; ++k) {
      const T* row = x + (o * n + k) * inner + j0;
      for (int64_t j = 0; j < len; ++j) acc[j] += static_cast<double>(std::exp(row[j] - shift[j]));
    }
    for (int64_t j = 0; j < len; ++j) {
      // A non-finite maximum is the answer itself (-inf: all -inf; +inf; NaN), and shifting by it would give NaN.
      y[o * inner + j0 + j] =
          std::isfinite(shift[j]) ? shift[j] + static_cast<T>(std::log(acc[j])) : shift[j];
    }
  });
}

template <typename T>
void reduce_sum_backward(int64_t outer, int64_t n, int64_t inner, const T* gy, T* gx) {
#pragma omp parallel for if (outer * n * inner >= kColumnParallelMin) schedule(static)
  for (int64_t r = 0; r < outer * n; ++r) std::copy(gy + (r / n) * inner, gy + (r / n + 1) * inner, gx + r * inner);
}

template <typename T>
void reduce_mean_backward(int64_t outer, int64_t n, int64_t inner, const T* gy, T* gx) {
  const T scale = T(1) / static_cast<T>(n);
#pragma omp parallel for if (outer * n * inner >= kColumnParallelMin) schedule(static)
  for (int64_t r = 0; r < outer * n; ++r) {
    const T* src = gy + (r / n) * inner;
    T* dst = gx + r * inner;
    for (int64_t j = 0; j < inner; ++j) dst[j] = src[j] * scale;
  }
}

template <typename T>
void reduce_index_backward(int64_t outer, int64_t n, int64_t inner, const int64_t* idx, const T* gy, T* gx) {
#pragma omp parallel for if (outer * n * inner >= kColumnParallelMin) schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    T* block = gx + o * n * inner;
    std::fill(block, block + n * inner, T(0));
    for (int64_t j = 0; j < inner; ++j) block[idx[o * inner + j] * inner + j] = gy[o * inner + j];
  }
}

template <typename T>
void reduce_logsumexp_backward(int64_t outer, int64_t n, int64_t inner, const T* x, const T* y, const T* gy,
                               T* gx) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
#pragma omp parallel for if (outer * n * inner >= kColumnParallelMin) schedule(static)
  for (int64_t r = 0; r < outer * n; ++r) {
    const int64_t o = r / n;
    const T* xr = x + r * inner;
    T* gxr = gx + r * inner;
    for (int64_t j = 0; j < inner; ++j) {
      const T lse = y[o * inner + j];
      gxr[j] = lse == kNegInf ? T(0) : gy[o * inner + j] * std::exp(xr[j] - lse);
    }
  }
}

#define SHARDRT_INSTANTIATE_REDUCE(T)                                                                      \
  template void reduce_sum<T>(int64_t, int64_t, int64_t, const T*, T*);                                    \
  template void reduce_mean<T>(int64_t, int64_t, int64_t, const T*, T*);                                   \
  template void reduce_max<T>(int64_t, int64_t, int64_t, const T*, T*, int64_t*);                          \
  template void reduce_min<T>(int64_t, int64_t, int64_t, const T*, T*, int64_t*);                          \
  template void reduce_argmax<T>(int64_t, int64_t, int64_t, const T*, int64_t*);                           \
  template void reduce_logsumexp<T>(int64_t, int64_t, int64_t, const T*, T*);                              \
  template void reduce_sum_backward<T>(int64_t, int64_t, int64_t, const T*, T*);                           \
  template void reduce_mean_backward<T>(int64_t, int64_t, int64_t, const T*, T*);                          \
  template void reduce_index_backward<T>(int64_t, int64_t, int64_t, const int64_t*, const T*, T*);         \
  template void reduce_logsumexp_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, T*);

SHARDRT_INSTANTIATE_REDUCE(float)
SHARDRT_INSTANTIATE_REDUCE(double)
#undef SHARDRT_INSTANTIATE_REDUCE

}  // namespace shardrt::kernels::cpu
