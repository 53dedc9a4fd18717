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

// The operands a block's kernel reads under `compute` (autocast): rounded in the form of the device's kernel.
Tensor block_operand(const Tensor& t, std::optional<DType> compute) {
  return compute ? round_operand(t, *compute, kernel_operand_form(t)) : t;
}

AttentionBlock attention_block(const char* op, const Tensor& q_in, const Tensor& kv_in, int64_t nk, int64_t dv,
                               double scale, HeadRange heads, std::optional<DType> compute) {
  const BlockDims b = block_dims(q_in, heads);
  const Tensor q = block_operand(q_in, compute), kv = block_operand(kv_in, compute);
  // out in the kernel's operand dtype (16-bit for autocast on CUDA, widened below); lse in q_in's f32 / f64.
  AttentionBlock r{Tensor::empty({b.nh, b.nq, dv}, q.dtype(), q.device()),
                   Tensor::empty({b.nh, b.nq}, q_in.dtype(), q.device())};
  dispatch_attention(op, q, [&](auto tag) {
    using T = decltype(tag);
    using A = kernels::cuda::AccumT<T>;
    const T* k = attention_data<T>(kv) + b.first * nk * b.d;
    const T* v = attention_data<T>(kv) + b.bh * nk * b.d + b.first * nk * dv;
    const T* qh = attention_data<T>(q) + b.first * b.nq * b.d;
    T* out = attention_data<T>(r.out);
    A* lse = attention_data<A>(r.lse);  // A == T for the CPU's float and double
    on_device(
        q,
        [&] {
          if constexpr (kCpuAttention<T>)
            kernels::cpu::attention_forward<T>(b.nh, b.nq, nk, b.d, dv, T(scale), qh, k, v, out, lse);
        },
        [&](CudaStream stream) {
          kernels::cuda::attention_forward<T>(b.nh, b.nq, nk, b.d, dv, A(scale), qh, k, v, out, lse, stream);
        });
  });
  r.out = r.out.to(q_in.dtype());
  return r;
}

AttentionBlockGrads attention_block_backward(const char* op, const Tensor& q_in, const Tensor& kv_in, int64_t nk,
                                             double scale, const Tensor& out_in, const Tensor& lse,
                                             const Tensor& grad_out_in, const Tensor& grad_lse, HeadRange heads,
                                             std::optional<DType> compute) {
  const BlockDims b = block_dims(q_in, heads);
  const int64_t dv = out_in.size(-1);
  const Tensor q = block_operand(q_in, compute), kv = block_operand(kv_in, compute);
  const Tensor grad_out = block_operand(grad_out_in, compute);
  // out only enters the row sums of dout·out: the 16-bit CUDA kernel reads it in its dtype, the CPU one in f32.
  const Tensor out = out_in.to(q.dtype());
  AttentionBlockGrads g{Tensor::empty({b.nh, b.nq, b.d}, q.dtype(), q.device()),
                        Tensor::empty({packed_kv_numel(b.nh, nk, b.d, dv)}, q.dtype(), q.device())};
  dispatch_attention(op, q, [&](auto tag) {
    using T = decltype(tag);
    using A = kernels::cuda::AccumT<T>;
    const int64_t qo = b.first * b.nq * b.d, oo = b.first * b.nq * dv, ro = b.first * b.nq;
    const T* k = attention_data<T>(kv) + b.first * nk * b.d;
    const T* v = attention_data<T>(kv) + b.bh * nk * b.d + b.first * nk * dv;
    T* gk = attention_data<T>(g.kv);
    T* gv = gk + b.nh * nk * b.d;
    const T *qh = attention_data<T>(q) + qo, *oh = attention_data<T>(out) + oo;
    const T* goh = attention_data<T>(grad_out) + oo;
    const A *lh = attention_data<A>(lse) + ro, *glh = attention_data<A>(grad_lse) + ro;  // A == T on the CPU
    T* gq = attention_data<T>(g.q);
    on_device(
        q,
        [&] {
          if constexpr (kCpuAttention<T>)
            kernels::cpu::attention_backward<T>(b.nh, b.nq, nk, b.d, dv, T(scale), qh, k, v, oh, lh, goh, glh, gq, gk,
                                                gv);
        },
        [&](CudaStream stream) {
          kernels::cuda::attention_backward<T>(b.nh, b.nq, nk, b.d, dv, A(scale), qh, k, v, oh, lh, goh, glh, gq, gk,
                                               gv, stream);
        });
  });
  g.q = g.q.to(q_in.dtype());
  g.kv = g.kv.to(q_in.dtype());
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
