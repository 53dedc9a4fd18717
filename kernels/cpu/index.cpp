#include "kernels/cpu/index.h"

#include <algorithm>

namespace shardrt::kernels::cpu {
namespace {

// Below this many elements touched an OpenMP region costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;
// The accumulating kernels split work over (outer, inner column block): every destination element belongs to
// exactly one task, which adds its contributions in increasing j, so repeated indices never race.
constexpr int64_t kInnerBlock = 256;

// Calls add_block(o, i0, i1) for every task (outer row o, inner columns [i0, i1)), in parallel when `work`
// elements are touched.
template <class AddBlock>
void for_each_inner_block(int64_t outer, int64_t inner, int64_t work, AddBlock add_block) {
  const int64_t n_blocks = (inner + kInnerBlock - 1) / kInnerBlock;
#pragma omp parallel for if (work > kParallelWork) schedule(static)
  for (int64_t task = 0; task < outer * n_blocks; ++task) {
    const int64_t i0 = (task % n_blocks) * kInnerBlock;
    add_block(task / n_blocks, i0, std::min(inner, i0 + kInnerBlock));
  }
}

}  // namespace

template <typename T>
void index_select(int64_t outer, int64_t n_src, int64_t inner, const T* src, int64_t n_idx, const int64_t* idx,
                  T* out) {
#pragma omp parallel for if (outer * n_idx * inner > kParallelWork) schedule(static)
  for (int64_t row = 0; row < outer * n_idx; ++row) {
    const int64_t o = row / n_idx, j = row % n_idx;
    std::copy_n(src + (o * n_src + idx[j]) * inner, inner, out + row * inner);
  }
}

template <typename T>
void index_add(int64_t outer, int64_t n_dst, int64_t inner, T* dst, int64_t n_idx, const int64_t* idx,
               const T* src) {
  for_each_inner_block(outer, inner, outer * n_idx * inner, [&](int64_t o, int64_t i0, int64_t i1) {
    for (int64_t j = 0; j < n_idx; ++j) {
      T* d = dst + (o * n_dst + idx[j]) * inner;
      const T* s = src + (o * n_idx + j) * inner;
      for (int64_t i = i0; i < i1; ++i) d[i] += s[i];
    }
  });
}

template <typename T>
void gather(int64_t outer, int64_t n_src, int64_t inner, const T* src, int64_t n_idx, const int64_t* idx, T* out) {
#pragma omp parallel for if (outer * n_idx * inner > kParallelWork) schedule(static)
  for (int64_t row = 0; row < outer * n_idx; ++row) {
    const int64_t o = row / n_idx;
    const T* s = src + o * n_src * inner;
    const int64_t* ix = idx + row * inner;
    T* y = out + row * inner;
    for (int64_t i = 0; i < inner; ++i) y[i] = s[ix[i] * inner + i];
  }
}

template <typename T>
void scatter_add(int64_t outer, int64_t n_dst, int64_t inner, T* dst, int64_t n_idx, const int64_t* idx,
                 const T* src) {
  for_each_inner_block(outer, inner, outer * n_idx * inner, [&](int64_t o, int64_t i0, int64_t i1) {
    T* d = dst + o * n_dst * inner;
    for (int64_t j = 0; j < n_idx; ++j) {
      const int64_t* ix = idx + (o * n_idx + j) * inner;
      const T* s = src + (o * n_idx + j) * inner;
      for (int64_t i = i0; i < i1; ++i) d[ix[i] * inner + i] += s[i];
    }
  });
}

#define SHARDRT_INSTANTIATE(T)                                                                            \
  template void index_select<T>(int64_t, int64_t, int64_t, const T*, int64_t, const int64_t*, T*);        \
  template void index_add<T>(int64_t, int64_t, int64_t, T*, int64_t, const int64_t*, const T*);           \
  template void gather<T>(int64_t, int64_t, int64_t, const T*, int64_t, const int64_t*, T*);              \
  template void scatter_add<T>(int64_t, int64_t, int64_t, T*, int64_t, const int64_t*, const T*);
SHARDRT_INSTANTIATE(float)
SHARDRT_INSTANTIATE(double)
#undef SHARDRT_INSTANTIATE

}  // namespace shardrt::kernels::cpu
