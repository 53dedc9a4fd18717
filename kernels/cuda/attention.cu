// Tiled attention with an online softmax (the FlashAttention recurrence): a block owns a tile of query rows of one
// (batch, head) problem and walks the keys a tile at a time, keeping the running max, sum and output of its rows
// in shared memory. Everything is scalar FMA on shared-memory tiles in the accumulation type, which keeps one code
// path for every dtype and head dim; tensor-core tiles are the documented next step (docs/gpu.md).
//
// Shared-memory tiles are row-major with the key-side row stride made odd (`padded`), so the threads of a warp,
// which read consecutive key rows of one tile in the score loop, hit distinct banks.
#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/half_io.cuh"
#include "kernels/cuda/launch.cuh"
#include "runtime/cuda/stream.h"
#include "runtime/cuda/stream_scratch.h"
#include "runtime/errors.h"

namespace shardrt::kernels::cuda {
namespace {

constexpr int kAttentionThreads = 128;

__host__ __device__ inline int padded(int n) { return n | 1; }

// A tile geometry: Br query rows by Bc key rows.
struct Tiles {
  int br = 0, bc = 0;
};

// Shared bytes of each kernel for a tile geometry, in units of the accumulation type.
inline int64_t forward_smem(Tiles t, int64_t d, int64_t dv) {
  return t.br * d + t.bc * padded(d) + t.bc * dv + t.br * dv + int64_t{t.br} * t.bc + 3 * t.br;
}
inline int64_t backward_kv_smem(Tiles t, int64_t d, int64_t dv) {
  return t.bc * padded(d) + t.bc * padded(dv) + t.bc * d + t.bc * dv + t.br * d + t.br * dv +
         2 * int64_t{t.br} * t.bc + 2 * t.br;
}
inline int64_t backward_q_smem(Tiles t, int64_t d, int64_t dv) {
  return t.br * d + t.br * dv + t.br * d + t.bc * padded(d) + t.bc * padded(dv) + int64_t{t.br} * t.bc + 2 * t.br;
}

// The largest square tile whose shared memory fits the current device, and the kernel's opt-in to that size.
template <typename A, typename Kernel>
Tiles pick_tiles(const char* kernel_name, Kernel kernel, int64_t (*smem)(Tiles, int64_t, int64_t), int64_t d,
                 int64_t dv, size_t* bytes) {
  int device = 0, optin = 0;
  SHARDRT_CUDA_CHECK(cudaGetDevice(&device));
  SHARDRT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  for (int t : {32, 16, 8}) {
    const Tiles tiles{t, t};
    const int64_t need = smem(tiles, d, dv) * static_cast<int64_t>(sizeof(A));
    if (need <= optin) {
      *bytes = static_cast<size_t>(need);
      SHARDRT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(need)));
      return tiles;
    }
  }
  throw ShapeError(detail::concat("kernels::cuda::", kernel_name, ": head dims D=", d, ", Dv=", dv,
                                  " need more shared memory than the device's ", optin,
                                  " bytes per block even in 8x8 tiles; split the heads or use a smaller head dim"));
}

// 32-row tiles only pay when a problem has enough rows to fill them; smaller problems use the next size that fits
// (the tile count of a launch must not depend on anything but the shapes, so results stay reproducible).
inline Tiles shrink_to(Tiles t, int64_t rows) {
  while (t.br > 8 && rows <= t.br / 2) t = Tiles{t.br / 2, t.bc / 2};
  return t;
}

template <typename T, typename A>
__device__ void load_tile(A* dst, int ld, const T* src, int rows, int cols) {
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) dst[(i / cols) * ld + i % cols] = load_acc(src[i]);
}

// s[r][c] = scale * a[r] . b[c] for r < rows, c < cols; a has row stride d, b row stride padded(d).
template <typename A>
__device__ void tile_scores(A* s, int bc, const A* a, const A* b, int rows, int cols, int d, A scale) {
  const int ldb = padded(d);
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int r = i / cols, c = i % cols;
    A dot = 0;
    for (int x = 0; x < d; ++x) dot += a[r * d + x] * b[c * ldb + x];
    s[r * bc + c] = scale * dot;
  }
}

template <typename T, typename A>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_forward_kernel(int64_t BH, int64_t Nq, int64_t Nk, int D, int Dv, A scale, Tiles tl, const T* q,
                             const T* k, const T* v, T* out, A* lse) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const int br = tl.br, bc = tl.bc;
  A* sq = reinterpret_cast<A*>(smem_bytes);
  A* sk = sq + br * D;
  A* sv = sk + bc * padded(D);
  A* so = sv + bc * Dv;
  A* ss = so + br * Dv;
  A* smax = ss + br * bc;
  A* ssum = smax + br;
  A* scorr = ssum + br;
  const int64_t q_tiles = (Nq + br - 1) / br;
  for (int64_t work = blockIdx.x; work < BH * q_tiles; work += gridDim.x) {
    const int64_t h = work / q_tiles, q0 = (work % q_tiles) * br;
    const int rows = static_cast<int>(std::min<int64_t>(br, Nq - q0));
    __syncthreads();  // the previous work item is done with every tile
    load_tile(sq, D, q + (h * Nq + q0) * D, rows, D);
    for (int i = threadIdx.x; i < rows * Dv; i += blockDim.x) so[i] = 0;
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      smax[r] = kNegInf<A>;
      ssum[r] = 0;
    }
    for (int64_t k0 = 0; k0 < Nk; k0 += bc) {
      const int cols = static_cast<int>(std::min<int64_t>(bc, Nk - k0));
      __syncthreads();
      load_tile(sk, padded(D), k + (h * Nk + k0) * D, cols, D);
      load_tile(sv, Dv, v + (h * Nk + k0) * Dv, cols, Dv);
      __syncthreads();
      tile_scores(ss, bc, sq, sk, rows, cols, D, scale);
      __syncthreads();
      // One thread per row folds the tile into the row's running max and sum and leaves exp(s - max) in ss.
      for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        A* sr = ss + r * bc;
        A m = smax[r];
        for (int c = 0; c < cols; ++c) m = sr[c] > m ? sr[c] : m;
        // A row whose scores are all -inf so far has nothing to rescale and contributes nothing.
        const bool empty = m == kNegInf<A>;
        const A corr = smax[r] == kNegInf<A> ? A(0) : exp_of(smax[r] - m);
        A sum = 0;
        for (int c = 0; c < cols; ++c) {
          sr[c] = empty ? A(0) : exp_of(sr[c] - m);
          sum += sr[c];
        }
        ssum[r] = ssum[r] * corr + sum;
        smax[r] = m;
        scorr[r] = corr;
      }
      __syncthreads();
      for (int i = threadIdx.x; i < rows * Dv; i += blockDim.x) {
        const int r = i / Dv, j = i % Dv;
        A acc = so[i] * scorr[r];
        for (int c = 0; c < cols; ++c) acc += ss[r * bc + c] * sv[c * Dv + j];
        so[i] = acc;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < rows * Dv; i += blockDim.x) {
      const A total = ssum[i / Dv];
      out[(h * Nq + q0) * Dv + i] = store_as<T>(total > 0 ? so[i] / total : A(0));
    }
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      lse[h * Nq + q0 + r] = ssum[r] > 0 ? smax[r] + log(ssum[r]) : kNegInf<A>;
    }
  }
}

// delta'_i = dO_i . O_i - dL/dlse_i: with P = exp(s - lse), dL/ds_ij = P_ij (dO_i . v_j - delta'_i).
template <typename T, typename A>
__global__ void attention_delta_kernel(int64_t rows, int Dv, const T* out, const T* grad_out, const A* grad_lse,
                                       A* delta) {
  for (int64_t r = first_index(); r < rows; r += grid_stride()) {
    A dot = 0;
    for (int j = 0; j < Dv; ++j) dot += load_acc(grad_out[r * Dv + j]) * load_acc(out[r * Dv + j]);
    delta[r] = dot - (grad_lse ? grad_lse[r] : A(0));
  }
}

// P (in p, unless p is null) and dS (in ds) of a rows x cols tile: P = exp(s - lse), dS = P (dO . v - delta').
template <typename A>
__device__ void tile_probs_and_grads(A* p, A* ds, int bc, const A* sq, const A* sk, const A* sdo, const A* sv,
                                     const A* slse, const A* sdelta, int rows, int cols, int D, int Dv, A scale) {
  const int ldk = padded(D), ldv = padded(Dv);
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    const int r = i / cols, c = i % cols;
    A s = 0, dp = 0;
    for (int x = 0; x < D; ++x) s += sq[r * D + x] * sk[c * ldk + x];
    for (int x = 0; x < Dv; ++x) dp += sdo[r * Dv + x] * sv[c * ldv + x];
    const A pr = slse[r] == kNegInf<A> ? A(0) : exp_of(scale * s - slse[r]);
    if (p) p[r * bc + c] = pr;
    ds[r * bc + c] = pr * (dp - sdelta[r]);
  }
}

// dK and dV of one key tile, summed over every query tile: dV_c = sum_r P_rc dO_r, dK_c = scale sum_r dS_rc q_r.
template <typename T, typename A>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_backward_kv_kernel(int64_t BH, int64_t Nq, int64_t Nk, int D, int Dv, A scale, Tiles tl, const T* q,
                                 const T* k, const T* v, const A* lse, const T* grad_out, const A* delta, T* grad_k,
                                 T* grad_v) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const int br = tl.br, bc = tl.bc;
  A* sk = reinterpret_cast<A*>(smem_bytes);
  A* sv = sk + bc * padded(D);
  A* sdk = sv + bc * padded(Dv);
  A* sdv = sdk + bc * D;
  A* sq = sdv + bc * Dv;
  A* sdo = sq + br * D;
  A* sp = sdo + br * Dv;
  A* sds = sp + br * bc;
  A* slse = sds + br * bc;
  A* sdelta = slse + br;
  const int64_t k_tiles = (Nk + bc - 1) / bc;
  for (int64_t work = blockIdx.x; work < BH * k_tiles; work += gridDim.x) {
    const int64_t h = work / k_tiles, k0 = (work % k_tiles) * bc;
    const int cols = static_cast<int>(std::min<int64_t>(bc, Nk - k0));
    __syncthreads();
    load_tile(sk, padded(D), k + (h * Nk + k0) * D, cols, D);
    load_tile(sv, padded(Dv), v + (h * Nk + k0) * Dv, cols, Dv);
    for (int i = threadIdx.x; i < cols * D; i += blockDim.x) sdk[i] = 0;
    for (int i = threadIdx.x; i < cols * Dv; i += blockDim.x) sdv[i] = 0;
    for (int64_t q0 = 0; q0 < Nq; q0 += br) {
      const int rows = static_cast<int>(std::min<int64_t>(br, Nq - q0));
      __syncthreads();
      load_tile(sq, D, q + (h * Nq + q0) * D, rows, D);
      load_tile(sdo, Dv, grad_out + (h * Nq + q0) * Dv, rows, Dv);
      for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        slse[r] = lse[h * Nq + q0 + r];
        sdelta[r] = delta[h * Nq + q0 + r];
      }
      __syncthreads();
      tile_probs_and_grads(sp, sds, bc, sq, sk, sdo, sv, slse, sdelta, rows, cols, D, Dv, scale);
      __syncthreads();
      for (int i = threadIdx.x; i < cols * Dv; i += blockDim.x) {
        const int c = i / Dv, j = i % Dv;
        A acc = 0;
        for (int r = 0; r < rows; ++r) acc += sp[r * bc + c] * sdo[r * Dv + j];
        sdv[i] += acc;
      }
      for (int i = threadIdx.x; i < cols * D; i += blockDim.x) {
        const int c = i / D, j = i % D;
        A acc = 0;
        for (int r = 0; r < rows; ++r) acc += sds[r * bc + c] * sq[r * D + j];
        sdk[i] += scale * acc;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < cols * D; i += blockDim.x) grad_k[(h * Nk + k0) * D + i] = store_as<T>(sdk[i]);
    for (int i = threadIdx.x; i < cols * Dv; i += blockDim.x) grad_v[(h * Nk + k0) * Dv + i] = store_as<T>(sdv[i]);
  }
}

// dQ of one query tile, summed over every key tile: dQ_r = scale sum_c dS_rc k_c.
template <typename T, typename A>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_backward_q_kernel(int64_t BH, int64_t Nq, int64_t Nk, int D, int Dv, A scale, Tiles tl, const T* q,
                                const T* k, const T* v, const A* lse, const T* grad_out, const A* delta, T* grad_q) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const int br = tl.br, bc = tl.bc;
  A* sq = reinterpret_cast<A*>(smem_bytes);
  A* sdo = sq + br * D;
  A* sdq = sdo + br * Dv;
  A* sk = sdq + br * D;
  A* sv = sk + bc * padded(D);
  A* sds = sv + bc * padded(Dv);
  A* slse = sds + br * bc;
  A* sdelta = slse + br;
  const int64_t q_tiles = (Nq + br - 1) / br;
  for (int64_t work = blockIdx.x; work < BH * q_tiles; work += gridDim.x) {
    const int64_t h = work / q_tiles, q0 = (work % q_tiles) * br;
    const int rows = static_cast<int>(std::min<int64_t>(br, Nq - q0));
    __syncthreads();
    load_tile(sq, D, q + (h * Nq + q0) * D, rows, D);
    load_tile(sdo, Dv, grad_out + (h * Nq + q0) * Dv, rows, Dv);
    for (int i = threadIdx.x; i < rows * D; i += blockDim.x) sdq[i] = 0;
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
      slse[r] = lse[h * Nq + q0 + r];
      sdelta[r] = delta[h * Nq + q0 + r];
    }
    for (int64_t k0 = 0; k0 < Nk; k0 += bc) {
      const int cols = static_cast<int>(std::min<int64_t>(bc, Nk - k0));
      __syncthreads();
      load_tile(sk, padded(D), k + (h * Nk + k0) * D, cols, D);
      load_tile(sv, padded(Dv), v + (h * Nk + k0) * Dv, cols, Dv);
      __syncthreads();
      tile_probs_and_grads<A>(nullptr, sds, bc, sq, sk, sdo, sv, slse, sdelta, rows, cols, D, Dv, scale);
      __syncthreads();
      for (int i = threadIdx.x; i < rows * D; i += blockDim.x) {
        const int r = i / D, j = i % D;
        A acc = 0;
        for (int c = 0; c < cols; ++c) acc += sds[r * bc + c] * sk[c * padded(D) + j];
        sdq[i] += scale * acc;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < rows * D; i += blockDim.x) grad_q[(h * Nq + q0) * D + i] = store_as<T>(sdq[i]);
  }
}

// The CPU kernel's merge rule, one thread per row.
template <typename T, typename A>
__global__ void attention_merge_kernel(int64_t rows, int64_t Dv, T* acc, A* lse, const T* out_b, const A* lse_b) {
  for (int64_t r = first_index(); r < rows; r += grid_stride()) {
    const A lb = lse_b[r], la = lse[r];
    if (lb == kNegInf<A>) continue;
    if (la == kNegInf<A>) {
      for (int64_t j = 0; j < Dv; ++j) acc[r * Dv + j] = out_b[r * Dv + j];
      lse[r] = lb;
      continue;
    }
    const A hi = la > lb ? la : lb;
    const A merged = hi + log(exp_of(la - hi) + exp_of(lb - hi));
    const A wa = exp_of(la - merged), wb = exp_of(lb - merged);
    for (int64_t j = 0; j < Dv; ++j) {
      acc[r * Dv + j] = store_as<T>(load_acc(acc[r * Dv + j]) * wa + load_acc(out_b[r * Dv + j]) * wb);
    }
    lse[r] = merged;
  }
}

unsigned work_blocks(int64_t work) { return static_cast<unsigned>(std::min<int64_t>(work, kMaxBlocks)); }

}  // namespace

template <typename T>
void attention_forward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, AccumT<T> scale, const T* q,
                       const T* k, const T* v, T* out, AccumT<T>* lse, CudaStream stream) {
  using A = AccumT<T>;
  if (BH * Nq == 0) return;
  auto kernel = attention_forward_kernel<T, A>;
  size_t bytes = 0;
  const Tiles tiles = shrink_to(pick_tiles<A>("attention_forward", kernel, forward_smem, D, Dv, &bytes), Nq);
  bytes = static_cast<size_t>(forward_smem(tiles, D, Dv)) * sizeof(A);
  const int64_t work = BH * ((Nq + tiles.br - 1) / tiles.br);
  kernel<<<work_blocks(work), kAttentionThreads, bytes, stream>>>(BH, Nq, Nk, static_cast<int>(D),
                                                                   static_cast<int>(Dv), scale, tiles, q, k, v, out,
                                                                   lse);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void attention_backward(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, AccumT<T> scale, const T* q,
                        const T* k, const T* v, const T* out, const AccumT<T>* lse, const T* grad_out,
                        const AccumT<T>* grad_lse, T* grad_q, T* grad_k, T* grad_v, CudaStream stream) {
  using A = AccumT<T>;
  const int di = static_cast<int>(D), dvi = static_cast<int>(Dv);
  StreamScratch delta(static_cast<size_t>(std::max<int64_t>(BH * Nq, 1)) * sizeof(A), stream);
  if (BH * Nq > 0) {
    attention_delta_kernel<T, A><<<blocks_for(BH * Nq, kThreads), kThreads, 0, stream>>>(BH * Nq, dvi, out, grad_out,
                                                                                        grad_lse, delta.as<A>());
    SHARDRT_CUDA_CHECK(cudaGetLastError());
  }
  if (BH * Nk > 0) {
    auto kernel = attention_backward_kv_kernel<T, A>;
    size_t bytes = 0;
    const Tiles tiles = shrink_to(pick_tiles<A>("attention_backward", kernel, backward_kv_smem, D, Dv, &bytes), Nk);
    bytes = static_cast<size_t>(backward_kv_smem(tiles, D, Dv)) * sizeof(A);
    const int64_t work = BH * ((Nk + tiles.bc - 1) / tiles.bc);
    kernel<<<work_blocks(work), kAttentionThreads, bytes, stream>>>(BH, Nq, Nk, di, dvi, scale, tiles, q, k, v, lse,
                                                                     grad_out, delta.as<A>(), grad_k, grad_v);
    SHARDRT_CUDA_CHECK(cudaGetLastError());
  }
  if (BH * Nq > 0) {
    auto kernel = attention_backward_q_kernel<T, A>;
    size_t bytes = 0;
    const Tiles tiles = shrink_to(pick_tiles<A>("attention_backward", kernel, backward_q_smem, D, Dv, &bytes), Nq);
    bytes = static_cast<size_t>(backward_q_smem(tiles, D, Dv)) * sizeof(A);
    const int64_t work = BH * ((Nq + tiles.br - 1) / tiles.br);
    kernel<<<work_blocks(work), kAttentionThreads, bytes, stream>>>(BH, Nq, Nk, di, dvi, scale, tiles, q, k, v, lse,
                                                                     grad_out, delta.as<A>(), grad_q);
    SHARDRT_CUDA_CHECK(cudaGetLastError());
  }
}

template <typename T>
void attention_merge(int64_t rows, int64_t Dv, T* acc, AccumT<T>* lse, const T* out_b, const AccumT<T>* lse_b,
                     CudaStream stream) {
  if (rows == 0) return;
  attention_merge_kernel<T, AccumT<T>><<<blocks_for(rows, kThreads), kThreads, 0, stream>>>(rows, Dv, acc, lse, out_b,
                                                                                            lse_b);
  SHARDRT_CUDA_CHECK(cudaGetLastError());
}

#define SHARDRT_INSTANTIATE_ATTENTION(T)                                                                            \
  template void attention_forward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, AccumT<T>, const T*, const T*,   \
                                     const T*, T*, AccumT<T>*, CudaStream);                                        \
  template void attention_backward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, AccumT<T>, const T*, const T*,  \
                                      const T*, const T*, const AccumT<T>*, const T*, const AccumT<T>*, T*, T*, T*, \
                                      CudaStream);                                                                 \
  template void attention_merge<T>(int64_t, int64_t, T*, AccumT<T>*, const T*, const AccumT<T>*, CudaStream);
SHARDRT_INSTANTIATE_ATTENTION(float)
SHARDRT_INSTANTIATE_ATTENTION(double)
SHARDRT_INSTANTIATE_ATTENTION(bf16)
SHARDRT_INSTANTIATE_ATTENTION(f16)
#undef SHARDRT_INSTANTIATE_ATTENTION

}  // namespace shardrt::kernels::cuda
