#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/column_blocks.h"
#include "kernels/cpu/softmax_simd.h"

namespace shardrt::kernels::cpu {
namespace {

// Softmax (Log = false) or log-softmax (Log = true) of the columns [j0, j1) of outer row o (inner > 1: strided
// slices; contiguous rows take the vector path of kernels/cpu/softmax_simd.cpp).
template <typename T, bool Log>
void softmax_slice(int64_t n, int64_t inner, const T* x, T* y, int64_t o, int64_t j0, int64_t j1) {
  const int64_t len = j1 - j0;
  T shift[kInnerBlock];
  double total[kInnerBlock];
  std::fill(shift, shift + len, -std::numeric_limits<T>::infinity());
  std::fill(total, total + len, 0.0);
  const int64_t base = o * n * inner + j0;
  for (int64_t k = 0; k < n; ++k) {
    const T* xr = x + base + k * inner;
    for (int64_t j = 0; j < len; ++j) shift[j] = std::max(shift[j], xr[j]);
  }
  for (int64_t k = 0; k < n; ++k) {
    const T* xr = x + base + k * inner;
    T* yr = y + base + k * inner;
    for (int64_t j = 0; j < len; ++j) {
      const T e = std::exp(xr[j] - shift[j]);
      total[j] += static_cast<double>(e);
      if constexpr (Log) {
        yr[j] = xr[j] - shift[j];
      } else {
        yr[j] = e;
      }
    }
  }
  T factor[kInnerBlock];
  for (int64_t j = 0; j < len; ++j) {
    factor[j] = Log ? static_cast<T>(std::log(total[j])) : static_cast<T>(1.0 / total[j]);
  }
  for (int64_t k = 0; k < n; ++k) {
    T* yr = y + base + k * inner;
    for (int64_t j = 0; j < len; ++j) {
      if constexpr (Log) {
        yr[j] -= factor[j];
      } else {
        yr[j] *= factor[j];
      }
    }
  }
}

// Backward of softmax (Log = false: gx = y (gy - sum gy y)) or log-softmax (Log = true: gx = gy - exp(y) sum gy)
// over strided slices, as softmax_slice.
template <typename T, bool Log>
void softmax_backward_slice(int64_t n, int64_t inner, const T* y, const T* gy, T* gx, int64_t o, int64_t j0,
                            int64_t j1) {
  const int64_t len = j1 - j0;
  double acc[kInnerBlock];
  std::fill(acc, acc + len, 0.0);
  const int64_t base = o * n * inner + j0;
  for (int64_t k = 0; k < n; ++k) {
    const T* yr = y + base + k * inner;
    const T* gyr = gy + base + k * inner;
    for (int64_t j = 0; j < len; ++j) acc[j] += Log ? static_cast<double>(gyr[j]) : static_cast<double>(gyr[j] * yr[j]);
  }
  T dot[kInnerBlock];
  for (int64_t j = 0; j < len; ++j) dot[j] = static_cast<T>(acc[j]);
  for (int64_t k = 0; k < n; ++k) {
    const T* yr = y + base + k * inner;
    const T* gyr = gy + base + k * inner;
    T* gxr = gx + base + k * inner;
    for (int64_t j = 0; j < len; ++j) {
      if constexpr (Log) {
        gxr[j] = gyr[j] - std::exp(yr[j]) * dot[j];
      } else {
        gxr[j] = yr[j] * (gyr[j] - dot[j]);
      }
    }
  }
}

// Contiguous rows (inner == 1) go to the vector bodies, a fixed block of rows per task; the rows are independent,
// so the thread count changes nothing.
template <class Body>
void for_each_row_block(int64_t rows, int64_t n, Body body) {
  const int64_t rows_per_block = std::max<int64_t>(1, kColumnParallelMin / 4 / std::max<int64_t>(n, 1));
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
#pragma omp parallel for if (rows * n >= kColumnParallelMin) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) body(b * rows_per_block, std::min(rows, (b + 1) * rows_per_block));
}

template <typename T, bool Log>
void softmax_forward(int64_t outer, int64_t n, int64_t inner, const T* x, T* y) {
  if (inner == 1) {
    for_each_row_block(outer, n, [&](int64_t r0, int64_t r1) { simd::softmax_rows(Log, r0, r1, n, x, y); });
  } else {
    for_each_column_block(outer, n, inner, [&](int64_t o, int64_t j0, int64_t j1) {
      softmax_slice<T, Log>(n, inner, x, y, o, j0, j1);
    });
  }
}

template <typename T, bool Log>
void softmax_grad(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx) {
  if (inner == 1) {
    for_each_row_block(outer, n, [&](int64_t r0, int64_t r1) {
      simd::softmax_backward_rows(Log, r0, r1, n, y, gy, gx);
    });
  } else {
    for_each_column_block(outer, n, inner, [&](int64_t o, int64_t j0, int64_t j1) {
      softmax_backward_slice<T, Log>(n, inner, y, gy, gx, o, j0, j1);
    });
  }
}

}  // namespace

template <typename T>
void softmax(int64_t outer, int64_t n, int64_t inner, const T* x, T* y) {
  softmax_forward<T, false>(outer, n, inner, x, y);
}

template <typename T>
void softmax_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx) {
  softmax_grad<T, false>(outer, n, inner, y, gy, gx);
}

template <typename T>
void log_softmax(int64_t outer, int64_t n, int64_t inner, const T* x, T* y) {
  softmax_forward<T, true>(outer, n, inner, x, y);
}

template <typename T>
void log_softmax_backward(int64_t outer, int64_t n, int64_t inner, const T* y, const T* gy, T* gx) {
  softmax_grad<T, true>(outer, n, inner, y, gy, gx);
}

#define SHARDRT_INSTANTIATE_SOFTMAX(T)                                                             \
  template void softmax<T>(int64_t, int64_t, int64_t, const T*, T*);                               \
  template void softmax_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, T*);            \
  template void log_softmax<T>(int64_t, int64_t, int64_t, const T*, T*);                           \
  template void log_softmax_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, T*);

SHARDRT_INSTANTIATE_SOFTMAX(float)
SHARDRT_INSTANTIATE_SOFTMAX(double)
#undef SHARDRT_INSTANTIATE_SOFTMAX

}  // namespace shardrt::kernels::cpu
