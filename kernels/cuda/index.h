// Indexing along the middle dim of an (outer, n, inner) view on a CUDA device.
// Contract: kernels/cpu/index.h (indices validated by the caller; index_add and scatter_add add into dst; an index
// the caller failed to reject is ignored safely, see check_index_bounds below).
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

// ---- bounds inside a CUDA graph capture ----
// The op layer checks index values on the host, which needs a device-to-host read that a capture forbids. While
// capturing it queues check_index_bounds instead: it sets *flag to 1 when any idx[j] lies outside [0, bound). The
// kernels above never read or write outside their tensors for such an index (it reads as zero and adds nowhere),
// so a bad index in a replayed step yields a flagged step, not corrupted memory.
// index_error_flag: the device's flag (an int in device memory, created zeroed on first call; call it before a
// capture, as allocation is not capturable). take_index_error: reads and clears it, synchronising the stream.
int* index_error_flag(int device);
void check_index_bounds(int64_t n_idx, const int64_t* idx, int64_t bound, int* flag, CudaStream stream);
bool take_index_error(int device);

}  // namespace shardrt::kernels::cuda
