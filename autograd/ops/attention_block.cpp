#include "autograd/ops/attention_block.h"

#include "autograd/ops/common.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"

namespace shardrt::ops_detail {

namespace {

// The flat problem geometry of q (…, Nq, D) and the resolved head range.
struct BlockDims {
  int64_t bh = 0, nq = 0, d = 0, first = 0, nh = 0;
};

BlockDims block_dims(const Tensor& q, HeadRange heads) {
  BlockDims b;
  b.nq = q.size(-2);
  b.d = q.size(-1);
  b.bh = shape_numel(Shape(q.shape().begin(), q.shape().end() - 2));
  b.first = heads.first;
  b.nh = heads.count < 0 ? b.bh - heads.first : heads.count;
  return b;
}

}  // namespace

int64_t packed_kv_numel(int64_t bh, int64_t nk, int64_t d, int64_t dv) { return bh * nk * (d + dv); }

AttentionBlock attention_block(const char* op, const Tensor& q, const Tensor& kv, int64_t nk, int64_t dv,
                               double scale, HeadRange heads) {
  const BlockDims b = block_dims(q, heads);
  AttentionBlock r{Tensor::empty({b.nh, b.nq, dv}, q.dtype(), q.device()),
                   Tensor::empty({b.nh, b.nq}, q.dtype(), q.device())};
  dispatch_float(op, q, [&](auto tag) {
    using T = decltype(tag);
    const T* k = kv.data<T>() + b.first * nk * b.d;
    const T* v = kv.data<T>() + b.bh * nk * b.d + b.first * nk * dv;
    const T* qh = q.data<T>() + b.first * b.nq * b.d;
    on_device(
        q,
        [&] {
          kernels::cpu::attention_forward<T>(b.nh, b.nq, nk, b.d, dv, T(scale), qh, k, v, r.out.data<T>(),
                                             r.lse.data<T>());
        },
        [&](CudaStream stream) {
          kernels::cuda::attention_forward<T>(b.nh, b.nq, nk, b.d, dv, T(scale), qh, k, v, r.out.data<T>(),
                                              r.lse.data<T>(), stream);
        });
  });
  return r;
}

AttentionBlockGrads attention_block_backward(const char* op, const Tensor& q, const Tensor& kv, int64_t nk,
                                             double scale, const Tensor& out, const Tensor& lse,
                                             const Tensor& grad_out, const Tensor& grad_lse, HeadRange heads) {
  const BlockDims b = block_dims(q, heads);
  const int64_t dv = out.size(-1);
  AttentionBlockGrads g{Tensor::empty({b.nh, b.nq, b.d}, q.dtype(), q.device()),
                        Tensor::empty({packed_kv_numel(b.nh, nk, b.d, dv)}, q.dtype(), q.device())};
  dispatch_float(op, q, [&](auto tag) {
    using T = decltype(tag);
    const int64_t qo = b.first * b.nq * b.d, oo = b.first * b.nq * dv, ro = b.first * b.nq;
    const T* k = kv.data<T>() + b.first * nk * b.d;
    const T* v = kv.data<T>() + b.bh * nk * b.d + b.first * nk * dv;
    T* gk = g.kv.data<T>();
    T* gv = gk + b.nh * nk * b.d;
    on_device(
        q,
        [&] {
          kernels::cpu::attention_backward<T>(b.nh, b.nq, nk, b.d, dv, T(scale), q.data<T>() + qo, k, v,
                                              out.data<T>() + oo, lse.data<T>() + ro, grad_out.data<T>() + oo,
                                              grad_lse.data<T>() + ro, g.q.data<T>(), gk, gv);
        },
        [&](CudaStream stream) {
          kernels::cuda::attention_backward<T>(b.nh, b.nq, nk, b.d, dv, T(scale), q.data<T>() + qo, k, v,
                                               out.data<T>() + oo, lse.data<T>() + ro, grad_out.data<T>() + oo,
                                               grad_lse.data<T>() + ro, g.q.data<T>(), gk, gv, stream);
        });
  });
  return g;
}

void merge_attention_block(const char* op, const Tensor& acc, const Tensor& lse, const AttentionBlock& block) {
  dispatch_float(op, acc, [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = block.lse.numel(), dv = block.out.size(-1);
    on_device(
        acc,
        [&] {
          kernels::cpu::attention_merge<T>(rows, dv, acc.data<T>(), lse.data<T>(), block.out.data<T>(),
                                           block.lse.data<T>());
        },
        [&](CudaStream stream) {
          kernels::cuda::attention_merge<T>(rows, dv, acc.data<T>(), lse.data<T>(), block.out.data<T>(),
                                            block.lse.data<T>(), stream);
        });
  });
}

}  // namespace shardrt::ops_detail
