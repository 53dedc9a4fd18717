// Sharded scaled dot-product attention: out = softmax(scale · q kᵀ) v and lse = log Σ_keys exp(scale · q kᵀ).
//
// Shapes: q (…, Nq, D), k (…, Nk, D), v (…, Nk, Dv), equal leading dims (BH problems); the sequence dim s = ndim-2
//   (dim 2 of BHSD). Notation below: P ranks on the mesh axis, r this rank's coordinate, eq/ek the per-rank
//   extents of q's / k's sequence dim, t the itemsize, KV(n) = BH·n·(D+Dv)·t bytes (K and V travel packed).
//
// Accepted placements (k and v must be placed identically, extents included; all three on one mesh):
//   q R,  kv R  on any mesh: the local op.
//   q S(s), kv R  on a 1-D mesh: local op on this rank's query rows.
//   q R,  kv S(s) on a 1-D mesh: block attention on the local keys, merged by log-sum-exp over the ranks.
//   q S(s), kv S(s) on a 1-D mesh: ring attention (KvStrategy::ring, default) or all-gather-KV.
//   Anything else (Partial, sharding any other dim, a Shard on a mesh of more than one axis, k/v placed apart,
//   different meshes) → MissingShardPatch naming the placements.
// Output: out (…, Nq, Dv) and lse (…, Nq), both with q's placements and q's sequence extents (the sequence dim of
//   lse is its last); computed locally, no metadata collective.
// Forward / backward collectives, all on the mesh axis, under "scaled_dot_product_attention.forward|backward":
//   q R, kv R:   none / none.
//   q S, kv R:   none / one all_reduce (sum) of dK and dV packed in >= f32: (numel k + numel v)·max(4,t)·(P-1).
//   q R, kv S:   two all_reduces: max of the local LSEs, BH·Nq·t·(P-1); sum of [out·exp(lse_r - max), exp(lse_r -
//                max)] packed, BH·Nq·(Dv+1)·t·(P-1) / one all_reduce (sum) of dq, BH·Nq·D·t·(P-1); dK, dV local.
//   ring:        P-1 ring_shifts (offset +1) of the packed K/V block, each posted before the current block
//                computes; bytes Σ_{i=0}^{P-2} KV(ek[r-i]) = KV(Nk - ek[r+1]) /
//                P-1 ring_shifts of K/V again (the next block in flight while the current block's grads compute)
//                and P ring_shifts of the travelling dK/dV accumulators, which after P hops are home:
//                KV(Nk - ek[r+1]) + KV(Nk) bytes. Nothing at P = 1.
//   all_gather:  one all_gather_v of packed K/V, KV(ek[r])·(P-1) / the same all_gather_v again (K/V are not
//                kept) and one reduce_scatter_v of packed dK/dV, KV(Nk - ek[r]).
// Saved for backward per rank: this rank's q, a packed copy of its k and v, out and lse. For q S, kv S that is
//   O(N/P) for both strategies (all_gather re-gathers K/V in backward rather than keeping the O(N) copy); for
//   q R, kv S it is 1/P of K/V and the whole q, out, lse (replicated by placement); q S, kv R saves what the local
//   op saves: this rank's q, out, lse and the replicated k, v themselves (no copy).
// Transient per rank: ring, two K/V blocks (current, next) and in backward three dK/dV blocks (being computed,
//   outgoing, incoming), all of N/P keys; all_gather, the whole K/V (and the whole dK/dV in backward).
// Numerics: blocks merge in the input dtype (f32 or f64) with a running LSE, each row rescaled once per block; the
//   backward feeds every block the GLOBAL out and lse, which makes each block's dq/dK/dV exact (the kernel's
//   probabilities exp(s - lse) are then the global ones). Ring steps compute a block in up to four slices of heads
//   and poll the transfers in flight between slices, so MPI moves the next block during compute rather than in
//   wait(). CPU tensors only.
#include "patches/ops.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "kernels/cpu/attention.h"
#include "patches/dispatch.h"
#include "patches/patch_util.h"
#include "runtime/factories.h"

namespace shardrt {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr const char* kForward = "scaled_dot_product_attention.forward";
constexpr const char* kBackward = "scaled_dot_product_attention.backward";

using AttentionPatch = Patch<AttentionShardOutput(ShardTensor, ShardTensor, ShardTensor, double, KvStrategy)>;

// ---- geometry ---------------------------------------------------------------------------------------------------

Shape leading(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

struct Dims {
  int64_t bh = 0, nq = 0, d = 0, dv = 0;  // nq: this rank's query rows
};

Dims dims_of(const Tensor& q, const Tensor& v) {
  return {shape_numel(leading(q.shape())), q.size(-2), q.size(-1), v.size(-1)};
}

int mod(int a, int p) { return ((a % p) + p) % p; }

// K and V of one block packed back to back in one flat buffer: K (BH, n, D) then V (BH, n, Dv).
int64_t kv_numel(const Dims& g, int64_t n) { return g.bh * n * (g.d + g.dv); }

Tensor pack_kv(const Tensor& k, const Tensor& v, const Dims& g) {
  const int64_t n = k.size(-2);
  Tensor buf = Tensor::empty({kv_numel(g, n)}, k.dtype(), k.device());
  buf.narrow(0, 0, g.bh * n * g.d).view(k.shape()).copy_(k.detach());
  buf.narrow(0, g.bh * n * g.d, g.bh * n * g.dv).view(v.shape()).copy_(v.detach());
  return buf;
}

// ---- block kernels and the LSE merge ---------------------------------------------------------------------------

// Heads [b0, b0 + nb) of one block: q, out, lse are this rank's (BH, Nq, ·) tensors; kv is a packed block of nk keys.
template <typename T>
void block_forward(const Dims& g, int64_t b0, int64_t nb, int64_t nk, double scale, const Tensor& q, const T* kv,
                   T* out, T* lse) {
  kernels::cpu::attention_forward<T>(nb, g.nq, nk, g.d, g.dv, T(scale), q.data<T>() + b0 * g.nq * g.d,
                                     kv + b0 * nk * g.d, kv + g.bh * nk * g.d + b0 * nk * g.dv, out + b0 * g.nq * g.dv,
                                     lse + b0 * g.nq);
}

// Grads of heads [b0, b0 + nb) of one K/V block (gkv packed like the block) against the GLOBAL out and lse.
template <typename T>
void block_backward(const Dims& g, int64_t b0, int64_t nb, int64_t nk, double scale, const Tensor& q, const T* kv,
                    const Tensor& out, const Tensor& lse, const Tensor& grad_out, const Tensor& grad_lse, T* gq,
                    T* gkv) {
  const int64_t qo = b0 * g.nq * g.d, oo = b0 * g.nq * g.dv, ko = b0 * nk * g.d, vo = g.bh * nk * g.d + b0 * nk * g.dv;
  kernels::cpu::attention_backward<T>(nb, g.nq, nk, g.d, g.dv, T(scale), q.data<T>() + qo, kv + ko, kv + vo,
                                      out.data<T>() + oo, lse.data<T>() + b0 * g.nq, grad_out.data<T>() + oo,
                                      grad_lse.data<T>() + b0 * g.nq, gq + qo, gkv + ko, gkv + vo);
}

// Runs fn(b0, nb) over the BH heads in up to four slices and lets the transfers in flight advance in between: an
// MPI transfer progresses inside MPI calls, so a block computed in one piece would leave the next block's
// transfer to wait().
template <typename F>
void in_slices(int64_t bh, std::initializer_list<CommHandle*> inflight, F&& fn) {
  const int64_t slices = std::min<int64_t>(bh, 4);
  for (int64_t i = 0; i < slices; ++i) {
    const int64_t b0 = bh * i / slices, b1 = bh * (i + 1) / slices;
    fn(b0, b1 - b0);
    for (CommHandle* h : inflight)
      if (h->pending()) h->ready();
  }
}

// Folds one block's normalised output o_b and LSE l_b into the running (acc, m): per row,
// m' = logaddexp(m, l_b), acc' = acc·exp(m - m') + o_b·exp(l_b - m'). A block with no keys (l_b = -inf) is skipped.
template <typename T>
void merge_block(int64_t rows, int64_t dv, T* acc, T* m, const T* o_b, const T* l_b) {
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < rows; ++i) {
    const T lb = l_b[i], mo = m[i];
    T* a = acc + i * dv;
    const T* o = o_b + i * dv;
    if (lb == neg_inf) continue;
    if (mo == neg_inf) {
      std::copy(o, o + dv, a);
      m[i] = lb;
      continue;
    }
    const T hi = std::max(mo, lb);
    const T merged = hi + std::log1p(std::exp(-std::abs(mo - lb)));
    const T wa = std::exp(mo - merged), wb = std::exp(lb - merged);
    for (int64_t c = 0; c < dv; ++c) a[c] = wa * a[c] + wb * o[c];
    m[i] = merged;
  }
}

template <typename T>
void add_into(T* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

Tensor neg_inf_like(const Shape& shape, const Tensor& like) {
  return full(shape, -std::numeric_limits<double>::infinity(), {like.dtype(), like.device()});
}

// ---- the sharded-KV context shared by ring, all-gather and the replicated-q fold --------------------------------

struct ShardedKvCtx {
  explicit ShardedKvCtx(Mesh m) : mesh(std::move(m)) {}
  Mesh mesh;
  Dims g;
  std::vector<int64_t> ek;  // per-rank key extents
  double scale = 1;
  Shape q_shape, k_shape, v_shape;
  Tensor q, kv, out, lse;  // q contiguous; kv this rank's packed K/V; out and lse the global result (this rank's rows)
};

ShardedKvCtx make_ctx(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double scale) {
  ShardedKvCtx ctx(q.mesh());
  ctx.g = dims_of(q.local(), v.local());
  ctx.ek = k.spec().extents(0);
  ctx.scale = scale;
  ctx.q_shape = q.local().shape();
  ctx.k_shape = k.local().shape();
  ctx.v_shape = v.local().shape();
  ctx.q = q.local().contiguous().detach();
  ctx.kv = pack_kv(k.local(), v.local(), ctx.g);
  return ctx;
}

Shape out_shape(const ShardedKvCtx& c) {
  Shape s = leading(c.q_shape);
  s.insert(s.end(), {c.g.nq, c.g.dv});
  return s;
}
Shape lse_shape(const ShardedKvCtx& c) {
  Shape s = leading(c.q_shape);
  s.push_back(c.g.nq);
  return s;
}

// Splits a packed dK/dV block back into the shapes of this rank's k and v.
std::vector<Tensor> unpack_grads(const ShardedKvCtx& c, const Tensor& gq, const Tensor& gkv) {
  const int64_t nk = c.k_shape[c.k_shape.size() - 2];
  const int64_t kn = c.g.bh * nk * c.g.d;
  return {gq.view(c.q_shape), gkv.narrow(0, 0, kn).view(c.k_shape),
          gkv.narrow(0, kn, c.g.bh * nk * c.g.dv).view(c.v_shape)};
}

// ---- ring ------------------------------------------------------------------------------------------------------

std::vector<Tensor> ring_forward(ShardedKvCtx& c) {
  Communicator& comm = patch::axis_comm(c.mesh, 0);
  const int p = comm.size(), r = comm.rank();
  const Dims& g = c.g;
  Tensor acc = zeros(out_shape(c), {c.q.dtype(), c.q.device()});
  Tensor m = neg_inf_like(lse_shape(c), c.q);
  Tensor o_b = Tensor::empty(out_shape(c), c.q.dtype(), c.q.device());
  Tensor l_b = Tensor::empty(lse_shape(c), c.q.dtype(), c.q.device());
  auto scope = comm.ledger().scope(kForward);
  Tensor cur = c.kv;
  for (int s = 0; s < p; ++s) {
    // Step s holds the block of rank r - s; the block of rank r - s - 1 travels meanwhile.
    Tensor next;
    CommHandle inflight;
    if (s + 1 < p) {
      next = Tensor::empty({kv_numel(g, c.ek[mod(r - s - 1, p)])}, cur.dtype(), cur.device());
      inflight = comm.ring_shift_async(cur, next);
    }
    const int64_t nk = c.ek[mod(r - s, p)];
    ops_detail::dispatch_float(kOp, c.q, [&](auto tag) {
      using T = decltype(tag);
      in_slices(g.bh, {&inflight}, [&](int64_t b0, int64_t nb) {
        block_forward<T>(g, b0, nb, nk, c.scale, c.q, cur.data<T>(), o_b.data<T>(), l_b.data<T>());
        const int64_t r0 = b0 * g.nq;
        merge_block<T>(nb * g.nq, g.dv, acc.data<T>() + r0 * g.dv, m.data<T>() + r0, o_b.data<T>() + r0 * g.dv,
                       l_b.data<T>() + r0);
      });
    });
    if (inflight.pending()) inflight.wait();
    cur = next;
  }
  c.out = acc;
  c.lse = m;
  return {acc, m};
}

std::vector<Tensor> ring_backward(ShardedKvCtx& c, const std::vector<Tensor>& grads) {
  Communicator& comm = patch::axis_comm(c.mesh, 0);
  const int p = comm.size(), r = comm.rank();
  const Dims& g = c.g;
  const Tensor grad_out = grads[0].contiguous(), grad_lse = grads[1].contiguous();
  Tensor gq = zeros({c.q.numel()}, {c.q.dtype(), c.q.device()});
  Tensor gq_b = Tensor::empty({c.q.numel()}, c.q.dtype(), c.q.device());
  auto scope = comm.ledger().scope(kBackward);
  Tensor cur = c.kv;
  Tensor g_sent, g_recv;  // the dK/dV accumulator last sent, and the one arriving for the next block
  CommHandle g_inflight;
  for (int s = 0; s < p; ++s) {
    Tensor next;
    CommHandle kv_inflight;
    if (s + 1 < p) {
      next = Tensor::empty({kv_numel(g, c.ek[mod(r - s - 1, p)])}, cur.dtype(), cur.device());
      kv_inflight = comm.ring_shift_async(cur, next);
    }
    const int64_t nk = c.ek[mod(r - s, p)];
    Tensor g_blk = Tensor::empty({kv_numel(g, nk)}, cur.dtype(), cur.device());
    ops_detail::dispatch_float(kOp, c.q, [&](auto tag) {
      using T = decltype(tag);
      in_slices(g.bh, {&kv_inflight, &g_inflight}, [&](int64_t b0, int64_t nb) {
        block_backward<T>(g, b0, nb, nk, c.scale, c.q, cur.data<T>(), c.out, c.lse, grad_out, grad_lse,
                          gq_b.data<T>(), g_blk.data<T>());
      });
      add_into<T>(gq.data<T>(), gq_b.data<T>(), gq.numel());
      if (s > 0) {
        // The accumulator of this block, carrying the grads of the ranks it visited before.
        g_inflight.wait();
        add_into<T>(g_blk.data<T>(), g_recv.data<T>(), g_blk.numel());
      }
    });
    if (p > 1) {
      g_sent = g_blk;
      g_recv = Tensor::empty({kv_numel(g, c.ek[mod(r - s - 1, p)])}, cur.dtype(), cur.device());
      g_inflight = comm.ring_shift_async(g_sent, g_recv);
    } else {
      g_recv = g_blk;
    }
    if (kv_inflight.pending()) kv_inflight.wait();
    cur = next;
  }
  // After P hops each accumulator is back with its owner.
  if (g_inflight.pending()) g_inflight.wait();
  return unpack_grads(c, gq, g_recv);
}

// ---- all-gather KV ---------------------------------------------------------------------------------------------

std::vector<int64_t> kv_counts(const ShardedKvCtx& c) {
  std::vector<int64_t> counts;
  for (int64_t n : c.ek) counts.push_back(kv_numel(c.g, n));
  return counts;
}

// Every rank's packed K/V gathered and laid out as one packed block over all Nk keys.
Tensor gather_kv(const ShardedKvCtx& c, const char* label) {
  Communicator& comm = patch::axis_comm(c.mesh, 0);
  const std::vector<int64_t> counts = kv_counts(c);
  int64_t nk = 0;
  for (int64_t n : c.ek) nk += n;
  Tensor gathered = Tensor::empty({kv_numel(c.g, nk)}, c.kv.dtype(), c.kv.device());
  {
    auto scope = comm.ledger().scope(label);
    comm.all_gather_v(c.kv, gathered, counts);
  }
  Tensor full_kv = Tensor::empty({kv_numel(c.g, nk)}, c.kv.dtype(), c.kv.device());
  const Tensor kf = full_kv.narrow(0, 0, c.g.bh * nk * c.g.d).view({c.g.bh, nk, c.g.d});
  const Tensor vf = full_kv.narrow(0, c.g.bh * nk * c.g.d, c.g.bh * nk * c.g.dv).view({c.g.bh, nk, c.g.dv});
  int64_t seg = 0, row = 0;
  for (int64_t n : c.ek) {
    const int64_t kn = c.g.bh * n * c.g.d, vn = c.g.bh * n * c.g.dv;
    kf.narrow(1, row, n).copy_(gathered.narrow(0, seg, kn).view({c.g.bh, n, c.g.d}));
    vf.narrow(1, row, n).copy_(gathered.narrow(0, seg + kn, vn).view({c.g.bh, n, c.g.dv}));
    seg += kn + vn;
    row += n;
  }
  return full_kv;
}

std::vector<Tensor> all_gather_forward(ShardedKvCtx& c) {
  const Tensor full_kv = gather_kv(c, kForward);
  int64_t nk = 0;
  for (int64_t n : c.ek) nk += n;
  c.out = Tensor::empty(out_shape(c), c.q.dtype(), c.q.device());
  c.lse = Tensor::empty(lse_shape(c), c.q.dtype(), c.q.device());
  ops_detail::dispatch_float(kOp, c.q, [&](auto tag) {
    using T = decltype(tag);
    block_forward<T>(c.g, 0, c.g.bh, nk, c.scale, c.q, full_kv.data<T>(), c.out.data<T>(), c.lse.data<T>());
  });
  return {c.out, c.lse};
}

std::vector<Tensor> all_gather_backward(ShardedKvCtx& c, const std::vector<Tensor>& grads) {
  Communicator& comm = patch::axis_comm(c.mesh, 0);
  const Tensor grad_out = grads[0].contiguous(), grad_lse = grads[1].contiguous();
  const Tensor full_kv = gather_kv(c, kBackward);
  int64_t nk = 0;
  for (int64_t n : c.ek) nk += n;
  Tensor gq = Tensor::empty({c.q.numel()}, c.q.dtype(), c.q.device());
  Tensor gkv = Tensor::empty({kv_numel(c.g, nk)}, c.q.dtype(), c.q.device());
  ops_detail::dispatch_float(kOp, c.q, [&](auto tag) {
    using T = decltype(tag);
    block_backward<T>(c.g, 0, c.g.bh, nk, c.scale, c.q, full_kv.data<T>(), c.out, c.lse, grad_out, grad_lse,
                      gq.data<T>(), gkv.data<T>());
  });
  // Re-pack per owner (rank j's dK rows then its dV rows), then each owner gets the sum over every rank's queries.
  const Tensor gk = gkv.narrow(0, 0, c.g.bh * nk * c.g.d).view({c.g.bh, nk, c.g.d});
  const Tensor gv = gkv.narrow(0, c.g.bh * nk * c.g.d, c.g.bh * nk * c.g.dv).view({c.g.bh, nk, c.g.dv});
  Tensor packed = Tensor::empty({gkv.numel()}, gkv.dtype(), gkv.device());
  int64_t seg = 0, row = 0;
  for (int64_t n : c.ek) {
    const int64_t kn = c.g.bh * n * c.g.d, vn = c.g.bh * n * c.g.dv;
    packed.narrow(0, seg, kn).view({c.g.bh, n, c.g.d}).copy_(gk.narrow(1, row, n));
    packed.narrow(0, seg + kn, vn).view({c.g.bh, n, c.g.dv}).copy_(gv.narrow(1, row, n));
    seg += kn + vn;
    row += n;
  }
  Tensor mine = Tensor::empty({c.kv.numel()}, gkv.dtype(), gkv.device());
  {
    auto scope = comm.ledger().scope(kBackward);
    comm.reduce_scatter_v(packed, mine, kv_counts(c));
  }
  return unpack_grads(c, gq, mine);
}

// ---- replicated q, sharded K/V: fold the ranks' block results by their LSEs ------------------------------------

std::vector<Tensor> fold_forward(ShardedKvCtx& c) {
  Communicator& comm = patch::axis_comm(c.mesh, 0);
  const Dims& g = c.g;
  const int64_t rows = g.bh * g.nq;
  const int64_t nk = c.ek[comm.rank()];
  Tensor o_b = Tensor::empty(out_shape(c), c.q.dtype(), c.q.device());
  Tensor l_b = Tensor::empty(lse_shape(c), c.q.dtype(), c.q.device());
  Tensor hi = Tensor::empty(lse_shape(c), c.q.dtype(), c.q.device());
  // [out·w (rows·Dv), w (rows)] with w = exp(lse_b - max over ranks): one sum gives numerator and denominator.
  Tensor packed = Tensor::empty({rows * (g.dv + 1)}, c.q.dtype(), c.q.device());
  c.out = Tensor::empty(out_shape(c), c.q.dtype(), c.q.device());
  c.lse = Tensor::empty(lse_shape(c), c.q.dtype(), c.q.device());
  auto scope = comm.ledger().scope(kForward);
  ops_detail::dispatch_float(kOp, c.q, [&](auto tag) {
    using T = decltype(tag);
    constexpr T neg_inf = -std::numeric_limits<T>::infinity();
    block_forward<T>(g, 0, g.bh, nk, c.scale, c.q, c.kv.data<T>(), o_b.data<T>(), l_b.data<T>());
    std::copy(l_b.data<T>(), l_b.data<T>() + rows, hi.data<T>());
    comm.all_reduce(hi, ReduceOp::max);
    T* pk = packed.data<T>();
    const T *lb = l_b.data<T>(), *h = hi.data<T>(), *ob = o_b.data<T>();
    for (int64_t i = 0; i < rows; ++i) {
      const T w = (lb[i] == neg_inf) ? T(0) : std::exp(lb[i] - h[i]);
      pk[rows * g.dv + i] = w;
      for (int64_t j = 0; j < g.dv; ++j) pk[i * g.dv + j] = w * ob[i * g.dv + j];
    }
    comm.all_reduce(packed, ReduceOp::sum);
    T *out = c.out.data<T>(), *lse = c.lse.data<T>();
    for (int64_t i = 0; i < rows; ++i) {
      const T sum_w = pk[rows * g.dv + i];
      lse[i] = sum_w > T(0) ? h[i] + std::log(sum_w) : neg_inf;
      for (int64_t j = 0; j < g.dv; ++j) out[i * g.dv + j] = sum_w > T(0) ? pk[i * g.dv + j] / sum_w : T(0);
    }
  });
  return {c.out, c.lse};
}

std::vector<Tensor> fold_backward(ShardedKvCtx& c, const std::vector<Tensor>& grads) {
  Communicator& comm = patch::axis_comm(c.mesh, 0);
  const Tensor grad_out = grads[0].contiguous(), grad_lse = grads[1].contiguous();
  const int64_t nk = c.ek[comm.rank()];
  Tensor gq = Tensor::empty({c.q.numel()}, c.q.dtype(), c.q.device());
  Tensor gkv = Tensor::empty({c.kv.numel()}, c.q.dtype(), c.q.device());
  ops_detail::dispatch_float(kOp, c.q, [&](auto tag) {
    using T = decltype(tag);
    block_backward<T>(c.g, 0, c.g.bh, nk, c.scale, c.q, c.kv.data<T>(), c.out, c.lse, grad_out, grad_lse,
                      gq.data<T>(), gkv.data<T>());
  });
  // This rank's keys contribute part of every query's grad; dK/dV of its own keys are complete.
  {
    auto scope = comm.ledger().scope(kBackward);
    comm.all_reduce(gq, ReduceOp::sum);
  }
  return unpack_grads(c, gq, gkv);
}

// ---- patches -------------------------------------------------------------------------------------------------

bool all_replicate(const ShardTensor& t) {
  for (const Placement& p : t.placements())
    if (!p.is_replicate()) return false;
  return true;
}

// Sharded along the sequence dim on a 1-D mesh.
bool seq_sharded(const ShardTensor& t) {
  return t.mesh().ndim() == 1 && t.spec().placement(0).is_shard(t.dim() - 2);
}

bool on_line(const ShardTensor& t) { return t.mesh().ndim() == 1; }

// Common to every patch: one mesh, no Partial, k and v placed identically.
bool well_placed(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v) {
  if (&q.mesh().flat() != &k.mesh().flat() || &q.mesh().flat() != &v.mesh().flat()) return false;
  if (q.spec().any_partial() || k.spec().any_partial() || v.spec().any_partial()) return false;
  return k.placements() == v.placements() && k.spec().all_extents() == v.spec().all_extents();
}

AttentionShardOutput wrap(const ShardTensor& q, const Tensor& out, const Tensor& lse) {
  Shape og = q.global_shape();
  og.back() = out.size(-1);
  Shape lg(q.global_shape().begin(), q.global_shape().end() - 1);
  return {ShardTensor(out, q.spec().with(q.placements(), og, q.spec().all_extents(), kOp)),
          ShardTensor(lse, q.spec().with(q.placements(), lg, q.spec().all_extents(), kOp))};
}

AttentionShardOutput run_local(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double scale,
                               KvStrategy) {
  const AttentionOutput o = scaled_dot_product_attention(q.local(), k.local(), v.local(), scale);
  return wrap(q, o.out, o.lse);
}

AttentionShardOutput run_q_sharded(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double scale,
                                   KvStrategy) {
  // K/V meet this rank's queries only: their grads are partial over the axis, summed once.
  const std::vector<Tensor> kv = patch::reduce_grads_over(kOp, q.mesh(), {0}, {k.local(), v.local()});
  const AttentionOutput o = scaled_dot_product_attention(q.local(), kv[0], kv[1], scale);
  return wrap(q, o.out, o.lse);
}

using SkForward = std::vector<Tensor> (*)(ShardedKvCtx&);
using SkBackward = std::vector<Tensor> (*)(ShardedKvCtx&, const std::vector<Tensor>&);

AttentionShardOutput run_sharded_kv(const char* node, SkForward fwd, SkBackward bwd, const ShardTensor& q,
                                    const ShardTensor& k, const ShardTensor& v, double scale) {
  SHARDRT_CHECK(!q.local().device().is_cuda(), DeviceError, kOp, ": sharded K/V patches run on CPU tensors only, got ",
                q.str());
  ShardedKvCtx ctx = make_ctx(q, k, v, scale);
  const std::vector<Tensor> outs = fwd(ctx);
  // Every rank records the node: its backward has collectives even where this rank's inputs need no grad.
  const std::vector<Tensor> rec =
      record_collective(node, {q.local(), k.local(), v.local()}, outs, true, std::move(ctx), bwd);
  return wrap(q, rec[0], rec[1]);
}

const std::vector<AttentionPatch>& attention_table() {
  static const std::vector<AttentionPatch> table = {
      {"sdpa/replicated",
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double, KvStrategy) {
         return well_placed(q, k, v) && all_replicate(q) && all_replicate(k);
       },
       run_local},
      {"sdpa/q-sharded-kv-replicated",
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double, KvStrategy) {
         return well_placed(q, k, v) && seq_sharded(q) && on_line(k) && all_replicate(k);
       },
       run_q_sharded},
      {"sdpa/q-replicated-kv-sharded",
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double, KvStrategy) {
         return well_placed(q, k, v) && on_line(q) && all_replicate(q) && seq_sharded(k);
       },
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double scale, KvStrategy) {
         return run_sharded_kv("scaled_dot_product_attention.kv_sharded", fold_forward, fold_backward, q, k, v, scale);
       }},
      {"sdpa/ring",
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double, KvStrategy s) {
         return s == KvStrategy::ring && well_placed(q, k, v) && seq_sharded(q) && seq_sharded(k);
       },
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double scale, KvStrategy) {
         return run_sharded_kv("scaled_dot_product_attention.ring", ring_forward, ring_backward, q, k, v, scale);
       }},
      {"sdpa/all-gather-kv",
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double, KvStrategy s) {
         return s == KvStrategy::all_gather && well_placed(q, k, v) && seq_sharded(q) && seq_sharded(k);
       },
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double scale, KvStrategy) {
         return run_sharded_kv("scaled_dot_product_attention.all_gather_kv", all_gather_forward, all_gather_backward,
                               q, k, v, scale);
       }},
  };
  return table;
}

// Global shapes and dtypes, checked identically on every rank before any patch runs.
void check_global(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v) {
  const Shape &qs = q.global_shape(), &ks = k.global_shape(), &vs = v.global_shape();
  const bool ranks_ok = qs.size() >= 2 && ks.size() == qs.size() && vs.size() == qs.size();
  SHARDRT_CHECK(ranks_ok && leading(ks) == leading(qs) && leading(vs) == leading(qs) && qs.back() == ks.back() &&
                    ks[ks.size() - 2] == vs[vs.size() - 2],
                ShapeError, kOp, ": q (…, Nq, D), k (…, Nk, D), v (…, Nk, Dv) with equal leading dims expected, got q ",
                q.str(), ", k ", k.str(), ", v ", v.str());
  SHARDRT_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), DTypeError, kOp,
                ": q, k, v must share a dtype, got q ", q.str(), ", k ", k.str(), ", v ", v.str());
}

}  // namespace

AttentionShardOutput scaled_dot_product_attention(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v,
                                                  double scale, KvStrategy strategy) {
  check_global(q, k, v);
  return dispatch_patch(kOp, attention_table(), {&q, &k, &v}, q, k, v, scale, strategy);
}

}  // namespace shardrt
