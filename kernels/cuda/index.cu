#include "kernels/cuda/index.h"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "kernels/cuda/launch.cuh"
#include "runtime/cuda/stream.h"
#include "runtime/cuda/stream_scratch.h"

namespace shardrt::kernels::cuda {
namespace {

// The kernels never touch memory outside their tensors: an index outside [0, n) reads as zero and adds nowhere.
// The op layer rejects such an index before the launch (a host check) or, inside a CUDA graph capture, flags it
// on the device (check_index_bounds) for the host to report after the replay.
__device__ inline bool in_range(int64_t k, int64_t n) { return k >= 0 && k < n; }

__global__ void check_index_bounds_kernel(int64_t n_idx, const int64_t* idx, int64_t bound, int* flag) {
  for (int64_t j = first_index(); j < n_idx; j += grid_stride())
    if (!in_range(idx[j], bound)) *flag = 1;  // every writer stores the same value: no atomic needed
}

template <typename T>
__global__ void index_select_kernel(int64_t outer, int64_t n_src, int64_t inner, const T* src, int64_t n_idx,
                                    const int64_t* idx, T* out) {
  const int64_t total = outer * n_idx * inner;
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t i = e % inner, j = (e / inner) % n_idx, o = e / (inner * n_idx);
    const int64_t k = idx[j];
    out[e] = in_range(k, n_src) ? src[(o * n_src + k) * inner + i] : T(0);
  }
}

template <typename T>
__global__ void gather_kernel(int64_t outer, int64_t n_src, int64_t inner, const T* src, int64_t n_idx,
                              const int64_t* idx, T* out) {
  const int64_t total = outer * n_idx * inner;
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t i = e % inner, o = e / (inner * n_idx);
    const int64_t k = idx[e];
    out[e] = in_range(k, n_src) ? src[(o * n_src + k) * inner + i] : T(0);
  }
}

// ---- deterministic scatter: sort the sources by destination, then one thread per destination -----------------

// keys[j] = idx[j], positions[j] = j: index_add's destinations are rows, shared by every (outer, inner). An index
// outside [0, n_dst) gets the key n_dst, which sorts last and adds nowhere.
__global__ void row_keys_kernel(int64_t n_idx, int64_t n_dst, const int64_t* idx, uint64_t* keys,
                                int64_t* positions) {
  for (int64_t j = first_index(); j < n_idx; j += grid_stride()) {
    keys[j] = static_cast<uint64_t>(in_range(idx[j], n_dst) ? idx[j] : n_dst);
    positions[j] = j;
  }
}

// keys[e] = the flat destination of source element e = (o, j, i): (o · n_dst + idx[e]) · inner + i, which orders
// destinations like dst's memory; positions[e] = e.
__global__ void element_keys_kernel(int64_t total, int64_t n_idx, int64_t n_dst, int64_t inner, const int64_t* idx,
                                    uint64_t invalid_key, uint64_t* keys, int64_t* positions) {
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t i = e % inner, o = e / (inner * n_idx);
    keys[e] = in_range(idx[e], n_dst) ? static_cast<uint64_t>((o * n_dst + idx[e]) * inner + i) : invalid_key;
    positions[e] = e;
  }
}

// Sorted position s of index_add, for every (o, i): when s starts a run of equal rows, adds the run's source rows
// (increasing j, as the sort is stable) onto dst[o, row, i], one at a time as the CPU does.
template <typename T>
__global__ void add_row_runs_kernel(int64_t outer, int64_t n_dst, int64_t inner, T* dst, int64_t n_idx,
                                    const uint64_t* rows, const int64_t* js, const T* src) {
  const int64_t total = outer * n_idx * inner;
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t i = e % inner, s = (e / inner) % n_idx, o = e / (inner * n_idx);
    if ((s > 0 && rows[s] == rows[s - 1]) || rows[s] >= static_cast<uint64_t>(n_dst)) continue;
    T* d = dst + (o * n_dst + static_cast<int64_t>(rows[s])) * inner + i;
    T acc = *d;
    for (int64_t t = s; t < n_idx && rows[t] == rows[s]; ++t) acc += src[(o * n_idx + js[t]) * inner + i];
    *d = acc;
  }
}

// Sorted position s of scatter_add: when s starts a run of equal destinations, adds the run's sources.
template <typename T>
__global__ void add_element_runs_kernel(int64_t total, T* dst, uint64_t invalid_key, const uint64_t* dests,
                                        const int64_t* positions, const T* src) {
  for (int64_t s = first_index(); s < total; s += grid_stride()) {
    if ((s > 0 && dests[s] == dests[s - 1]) || dests[s] == invalid_key) continue;
    T* d = dst + static_cast<int64_t>(dests[s]);
    T acc = *d;
    for (int64_t t = s; t < total && dests[t] == dests[s]; ++t) acc += src[positions[t]];
    *d = acc;
  }
}

// Bits the radix sort must look at for keys below `bound`.
int key_bits(uint64_t bound) {
  int bits = 1;
  while (bits < 64 && (uint64_t{1} << bits) < bound) ++bits;
  return bits;
}

// Scratch for n keys and positions, in and out, and cub's own temporary storage; sorts (keys, positions) stably
// by key. Returns the sorted pair through the out pointers.
class StableSort {
 public:
  StableSort(int64_t n, uint64_t key_bound, cudaStream_t stream)
      : n_(n), bits_(key_bits(key_bound)), stream_(stream),
        buffers_(static_cast<std::size_t>(n) * 2 * (sizeof(uint64_t) + sizeof(int64_t)), stream) {
    keys_in = buffers_.as<uint64_t>();
    keys_out = keys_in + n;
    pos_in = reinterpret_cast<int64_t*>(keys_out + n);
    pos_out = pos_in + n;
  }

  void sort() {
    std::size_t temp_bytes = 0;
    SHARDRT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out, n_,
                                                       0, bits_, stream_));
    StreamScratch temp(temp_bytes, stream_);
    SHARDRT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.as<void>(), temp_bytes, keys_in, keys_out, pos_in,
                                                       pos_out, n_, 0, bits_, stream_));
  }

  uint64_t *keys_in, *keys_out;
  int64_t *pos_in, *pos_out;

 private:
  int64_t n_;
  int bits_;
  cudaStream_t stream_;
  StreamScratch buffers_;
};

}  // namespace

template <typename T>
void index_select(int64_t outer, int64_t n_src, int64_t inner, const T* src, int64_t n_idx, const int64_t* idx,
                  T* out, cudaStream_t stream) {
  const int64_t total = outer * n_idx * inner;
  if (total == 0) return;
  index_select_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(outer, n_src, inner, src, n_idx, idx,
                                                                                out);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void gather(int64_t outer, int64_t n_src, int64_t inner, const T* src, int64_t n_idx, const int64_t* idx, T* out,
            cudaStream_t stream) {
  const int64_t total = outer * n_idx * inner;
  if (total == 0) return;
  gather_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(outer, n_src, inner, src, n_idx, idx, out);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void index_add(int64_t outer, int64_t n_dst, int64_t inner, T* dst, int64_t n_idx, const int64_t* idx, const T* src,
               cudaStream_t stream) {
  const int64_t total = outer * n_idx * inner;
  if (total == 0) return;
  StableSort sorted(n_idx, static_cast<uint64_t>(n_dst) + 1, stream);
  row_keys_kernel<<<blocks_for(n_idx, kThreads), kThreads, 0, stream>>>(n_idx, n_dst, idx, sorted.keys_in,
                                                                        sorted.pos_in);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
  sorted.sort();
  add_row_runs_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(outer, n_dst, inner, dst, n_idx,
                                                                                sorted.keys_out, sorted.pos_out, src);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void scatter_add(int64_t outer, int64_t n_dst, int64_t inner, T* dst, int64_t n_idx, const int64_t* idx,
                 const T* src, cudaStream_t stream) {
  const int64_t total = outer * n_idx * inner;
  if (total == 0) return;
  const uint64_t invalid_key = static_cast<uint64_t>(outer * n_dst * inner);
  StableSort sorted(total, invalid_key + 1, stream);
  element_keys_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(total, n_idx, n_dst, inner, idx,
                                                                            invalid_key, sorted.keys_in,
                                                                            sorted.pos_in);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
  sorted.sort();
  add_element_runs_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(total, dst, invalid_key,
                                                                                    sorted.keys_out, sorted.pos_out,
                                                                                    src);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

int* index_error_flag(int device) {
  // One flag per device, allocated on first use (call it before a capture: cudaMalloc is not capturable) and
  // kept for the process's life, like the streams.
  static std::mutex mutex;
  static std::map<int, int*> flags;
  std::lock_guard<std::mutex> lock(mutex);
  int*& flag = flags[device];
  if (!flag) {
    cudaStream_t stream = current_stream(device);
    SHARDRT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int)));
    SHARDRT_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream));
    SHARDRT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return flag;
}

void check_index_bounds(int64_t n_idx, const int64_t* idx, int64_t bound, int* flag, cudaStream_t stream) {
  if (n_idx == 0) return;
  check_index_bounds_kernel<<<blocks_for(n_idx, kThreads), kThreads, 0, stream>>>(n_idx, idx, bound, flag);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

bool take_index_error(int device) {
  int* flag = index_error_flag(device);
  cudaStream_t stream = current_stream(device);
  int host = 0;
  SHARDRT_CUDA_CHECK(cudaMemcpyAsync(&host, flag, sizeof(int), cudaMemcpyDeviceToHost, stream));
  SHARDRT_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream));
  SHARDRT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host != 0;
}

#define SHARDRT_INSTANTIATE_INDEX(T)                                                                              \
  template void index_select<T>(int64_t, int64_t, int64_t, const T*, int64_t, const int64_t*, T*, cudaStream_t); \
  template void index_add<T>(int64_t, int64_t, int64_t, T*, int64_t, const int64_t*, const T*, cudaStream_t);    \
  template void gather<T>(int64_t, int64_t, int64_t, const T*, int64_t, const int64_t*, T*, cudaStream_t);       \
  template void scatter_add<T>(int64_t, int64_t, int64_t, T*, int64_t, const int64_t*, const T*, cudaStream_t);

SHARDRT_INSTANTIATE_INDEX(float)
SHARDRT_INSTANTIATE_INDEX(double)
#undef SHARDRT_INSTANTIATE_INDEX

}  // namespace shardrt::kernels::cuda
