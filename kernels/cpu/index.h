// Indexing along the middle dim of an (outer, n, inner) view. Indices are int64 and must already be validated
// by the caller (0 <= idx < n_src or n_dst): these kernels do not bounds-check.
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu {

// out[o, j, i] = src[o, idx[j], i];  src (outer, n_src, inner), idx (n_idx), out (outer, n_idx, inner).
template <typename T>
void index_select(int64_t outer, int64_t n_src, int64_t inner, const T* src, int64_t n_idx, const int64_t* idx,
                  T* out);

// dst[o, idx[j], i] += src[o, j, i];  the adjoint of index_select. dst (outer, n_dst, inner) is accumulated into,
// not overwritten; repeated indices add up, in increasing j for every element (deterministic).
template <typename T>
void index_add(int64_t outer, int64_t n_dst, int64_t inner, T* dst, int64_t n_idx, const int64_t* idx,
               const T* src);

// PyTorch gather along the middle dim: out[o, j, i] = src[o, idx[o, j, i], i];
// src (outer, n_src, inner), idx and out (outer, n_idx, inner).
template <typename T>
void gather(int64_t outer, int64_t n_src, int64_t inner, const T* src, int64_t n_idx, const int64_t* idx, T* out);

// dst[o, idx[o, j, i], i] += src[o, j, i];  the adjoint of gather. dst (outer, n_dst, inner) is accumulated into;
// repeated indices add up in increasing j (deterministic).
template <typename T>
void scatter_add(int64_t outer, int64_t n_dst, int64_t inner, T* dst, int64_t n_idx, const int64_t* idx,
                 const T* src);

}  // namespace shardrt::kernels::cpu
