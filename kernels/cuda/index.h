// Indexing along the middle dim of an (outer, n, inner) view on a CUDA device.
// Contract: kernels/cpu/index.h (indices validated by the caller; index_add and scatter_add add into dst).
// CUDA: index_select and gather run one thread per output element. index_add and scatter_add are deterministic,
// not atomic: the (destination, source position) pairs are sorted stably by destination (cub's radix sort, scratch
// from the caching allocator), then one thread per destination adds its sources onto it in increasing j, exactly
// the CPU's order, so the results equal the CPU kernel's bit for bit and never vary between runs. Atomics would
// skip the sort but make the grads of a training step change from run to run (float addition does not
// associate), which the bit-for-bit replay of a step (CUDA graphs) and the reproducibility rule of DESIGN.md
// forbid. Templates over T in {float, double}; device pointers (idx included) on the device that owns `stream`;
// queued on `stream`, never synchronises.
#pragma once
#include <cstdint>

#include "runtime/cuda_context.h"

namespace shardrt::kernels::cuda {

template <typename T>
void index_select(int64_t outer, int64_t n_src, int64_t inner, const T* src, int64_t n_idx, const int64_t* idx,
                  T* out, CudaStream stream);

template <typename T>
void index_add(int64_t outer, int64_t n_dst, int64_t inner, T* dst, int64_t n_idx, const int64_t* idx, const T* src,
               CudaStream stream);

template <typename T>
void gather(int64_t outer, int64_t n_src, int64_t inner, const T* src, int64_t n_idx, const int64_t* idx, T* out,
            CudaStream stream);

template <typename T>
void scatter_add(int64_t outer, int64_t n_dst, int64_t inner, T* dst, int64_t n_idx, const int64_t* idx,
                 const T* src, CudaStream stream);

}  // namespace shardrt::kernels::cuda
