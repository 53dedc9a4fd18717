#include "runtime/cuda/copy_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/cuda/stream.h"
#include "runtime/half.h"

namespace shardrt {

namespace {

constexpr int kMaxDims = 8;
constexpr int kThreads = 256;
// Enough blocks to fill any current GPU; larger copies loop over the grid.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// A bool element is one byte. Any nonzero byte reads as true; true is written as 1.
struct BoolByte {
  uint8_t bits;
};

// Element conversion, the device twin of the host rules in copy_cpu.cpp: 16-bit floats go through float, and
// a wider value becomes bf16/f16 by first rounding it to float (as the host does), so both sides give the
// same bits.
template <typename D, typename S>
__device__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>) return v;
  else if constexpr (std::is_same_v<S, BoolByte>) return convert<D>(static_cast<uint8_t>(v.bits != 0));
  else if constexpr (std::is_same_v<S, __nv_bfloat16>) return convert<D>(__bfloat162float(v));
  else if constexpr (std::is_same_v<S, __half>) return convert<D>(__half2float(v));
  else if constexpr (std::is_same_v<D, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<D, __half>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<D, BoolByte>) return BoolByte{static_cast<uint8_t>(v != S(0))};
  else return static_cast<D>(v);
}

// The copy's index space after size-1 dims are dropped and neighbouring dims that both operands walk as one are
// merged (a contiguous copy becomes 1-d). Passed to the kernel by value.
struct CopyGeometry {
  int ndim;
  int64_t numel;
  int64_t shape[kMaxDims];
  int64_t dst_strides[kMaxDims];
  int64_t src_strides[kMaxDims];
};

CopyGeometry make_geometry(int ndim, const int64_t* shape, const int64_t* dst_strides, const int64_t* src_strides) {
  CopyGeometry g{};
  g.numel = 1;
  for (int d = 0; d < ndim; ++d) {
    g.numel *= shape[d];
    if (shape[d] == 1) continue;
    const int last = g.ndim - 1;
    if (g.ndim > 0 && g.dst_strides[last] == dst_strides[d] * shape[d] &&
        g.src_strides[last] == src_strides[d] * shape[d]) {
      g.shape[last] *= shape[d];
      g.dst_strides[last] = dst_strides[d];
      g.src_strides[last] = src_strides[d];
    } else {
      g.shape[g.ndim] = shape[d];
      g.dst_strides[g.ndim] = dst_strides[d];
      g.src_strides[g.ndim] = src_strides[d];
      ++g.ndim;
    }
  }
  if (g.ndim == 0) {  // a single element
    g.ndim = 1;
    g.shape[0] = 1;
  }
  return g;
}

// One thread per output element: the flat row-major index is decomposed into per-dim indices (last dim fastest).
// The dim loop has a fixed trip count so the geometry stays in the kernel's parameter space.
template <typename D, typename S>
__global__ void copy_kernel(CopyGeometry g, D* dst, const S* src) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < g.numel; i += int64_t{blockDim.x} * gridDim.x) {
    int64_t rest = i, dst_off = 0, src_off = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d > 0; --d) {
      if (d < g.ndim) {
        const int64_t idx = rest % g.shape[d];
        rest /= g.shape[d];
        dst_off += idx * g.dst_strides[d];
        src_off += idx * g.src_strides[d];
      }
    }
    dst[dst_off + rest * g.dst_strides[0]] = convert<D>(src[src_off + rest * g.src_strides[0]]);
  }
}

template <typename W>
__global__ void fill_kernel(W* dst, int64_t n, W value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{blockDim.x} * gridDim.x) {
    dst[i] = value;
  }
}

// Calls f with a value of the device element type of t.
template <typename F>
void visit_device_type(DType t, F&& f) {
  switch (t) {
    case DType::f64: return f(double{});
    case DType::f32: return f(float{});
    case DType::bf16: return f(__nv_bfloat16{});
    case DType::f16: return f(__half{});
    case DType::i64: return f(int64_t{});
    case DType::i32: return f(int32_t{});
    case DType::u8: return f(uint8_t{});
    case DType::boolean: return f(BoolByte{});
  }
}

// Calls f with an unsigned integer as wide as one element of t: a same-dtype copy moves bits.
template <typename F>
void visit_bits_type(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    default: return f(uint64_t{});
  }
}

// The bit pattern of `value` stored as one element of `dtype`, by the host conversion rules (copy_cpu.cpp).
uint64_t element_bits(DType dtype, double value) {
  auto bits_of = [](auto v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(v));
    return bits;
  };
  switch (dtype) {
    case DType::f64: return bits_of(value);
    case DType::f32: return bits_of(static_cast<float>(value));
    case DType::bf16: return float_to_bf16(static_cast<float>(value)).bits;
    case DType::f16: return float_to_f16(static_cast<float>(value)).bits;
    case DType::i64: return bits_of(static_cast<int64_t>(value));
    case DType::i32: return bits_of(static_cast<int32_t>(value));
    case DType::u8: return bits_of(static_cast<uint8_t>(value));
    case DType::boolean: return value != 0.0 ? 1 : 0;
  }
  return 0;
}

}  // namespace

void copy_strided_cuda(int device, int ndim, const int64_t* shape, void* dst, DType dst_dtype,
                       const int64_t* dst_strides, const void* src, DType src_dtype, const int64_t* src_strides) {
  const CopyGeometry g = make_geometry(ndim, shape, dst_strides, src_strides);
  if (g.numel == 0) return;
  cudaStream_t stream = current_stream(device);
  if (dst_dtype == src_dtype && g.ndim == 1 && g.dst_strides[0] == 1 && g.src_strides[0] == 1) {
    SHARDRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(g.numel) * dtype_size(dst_dtype),
                                       cudaMemcpyDeviceToDevice, stream));
    return;
  }
  auto launch = [&](auto d_tag, auto s_tag) {
    using D = decltype(d_tag);
    using S = decltype(s_tag);
    copy_kernel<D, S><<<blocks_for(g.numel), kThreads, 0, stream>>>(g, static_cast<D*>(dst),
                                                                    static_cast<const S*>(src));
  };
  if (dst_dtype == src_dtype) {
    visit_bits_type(dst_dtype, [&](auto tag) { launch(tag, tag); });
  } else {
    visit_device_type(dst_dtype, [&](auto d_tag) {
      visit_device_type(src_dtype, [&](auto s_tag) {
        // Equal types never get here (they took the bits path), so no kernel is instantiated for them.
        if constexpr (!std::is_same_v<decltype(d_tag), decltype(s_tag)>) launch(d_tag, s_tag);
      });
    });
  }
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

void fill_cuda(int device, void* dst, DType dtype, int64_t n, double value) {
  if (n == 0) return;
  cudaStream_t stream = current_stream(device);
  const uint64_t bits = element_bits(dtype, value);
  const std::size_t size = dtype_size(dtype);
  if (bits == 0 || size == 1) {  // every byte of the pattern is the same: a memset does it
    SHARDRT_CUDA_CHECK(cudaMemsetAsync(dst, static_cast<int>(bits), static_cast<std::size_t>(n) * size, stream));
    return;
  }
  visit_bits_type(dtype, [&](auto tag) {
    using W = decltype(tag);
    fill_kernel<W><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<W*>(dst), n, static_cast<W>(bits));
  });
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

void copy_bytes_host_device(int device, void* dst, const void* src, std::size_t bytes, bool to_device) {
  cudaStream_t stream = current_stream(device);
  const auto kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  SHARDRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
  SHARDRT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_bytes_peer(int dst_device, void* dst, int src_device, const void* src, std::size_t bytes) {
  SHARDRT_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, current_stream(dst_device)));
}

}  // namespace shardrt
