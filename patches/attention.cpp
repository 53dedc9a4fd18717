// Sharded scaled dot-product attention: out = softmax(scale · q kᵀ) v and lse = log Σ_keys exp(scale · q kᵀ).
//
// q (…, Nq, D), k (…, Nk, D), v (…, Nk, Dv), equal leading dims (BH problems); the sequence dim is ndim-2. P ranks on
// the mesh axis, r this rank, ek the per-rank key extents, t the itemsize, KV(n) = BH·n·(D+Dv)·t (K and V travel
// packed). k and v are placed identically (extents included), all three on one mesh; out (…, Nq, Dv) and lse (…, Nq)
// get q's placements and extents, computed locally. Collectives run on the sequence axis under
// "scaled_dot_product_attention.forward|backward"; bytes are per rank, none at P = 1.
//
// Placements: at most one mesh axis A (the sequence axis) shards the sequence dim of q or of k/v, the other then
// Shard of its sequence dim too or Replicate there; on every other axis q and k/v are placed alike, Replicate or
// Shard of the same leading dim (batch or heads) with equal extents, and need no collective (the canonical 2-D
// layout: batch or heads over ddp, the sequence over domain). The table is per axis A, P its size, BH the local
// leading size (this rank's batch/heads slice):
//  q, kv on A  forward collectives on A               backward collectives on A              saved / rank
//  no A        none                                  none                                   the local op's
//  S, R        none                                  all_reduce dK|dV in >= f32:            q_r, out_r, lse_r
//                                                    (numel k + numel v)·max(4,t)·(P-1)     (k, v not copied)
//  R, S        all_reduce max of lse: BH·Nq·t·(P-1)  all_reduce dq: BH·Nq·D·t·(P-1)         q, out, lse, kv_r
//              all_reduce [out·w, w]: BH·Nq·(Dv+1)·t·(P-1)
//  S, S ring   P-1 ring_shift kv: KV(Nk - ek[r+1])   P-1 ring_shift kv, P ring_shift dK|dV:  q_r, kv_r,
//                                                    KV(Nk - ek[r+1]) + KV(Nk)              out_r, lse_r
//  S, S a-g    all_gather_v kv: KV(ek[r])·(P-1)      all_gather_v kv again, reduce_scatter_v  q_r, kv_r,
//                                                    dK|dV: KV(ek[r])·(P-1) + KV(Nk - ek[r])  out_r, lse_r
//  Anything else (Partial, the feature dim sharded, two axes on sequence dims, q and k/v split apart on a leading
//  dim, k and v placed apart, different meshes) → MissingShardPatch naming the placements. S, S picks ring
//  (KvStrategy::ring, the default) or all-gather (a-g); kv_r is this rank's packed K/V copy, so S, S saves O(N/P)
//  with either strategy. K/V grads (activations) are summed over A whatever its role.
// Transient per rank: ring, two K/V blocks (current, next) and in backward three dK/dV blocks (being computed,
//   outgoing, incoming), all of N/P keys; all-gather, the whole K/V (and the whole dK/dV in backward).
// Numerics: blocks merge in the input dtype with a running LSE, each row rescaled once per block; the backward feeds
//   every block the GLOBAL out and lse, which makes each block's dq/dK/dV exact. Ring steps compute a block in up to
//   four slices of heads and poll the transfers in flight between slices, so MPI moves the next block during
//   compute rather than in wait(). The blocks run through autograd/ops/attention_block.h: CPU kernels (on CUDA
//   tensors, its DeviceError).
#include "patches/ops.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <numeric>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/attention_block.h"
#include "autograd/ops/common.h"
#include "patches/dispatch.h"
#include "patches/mutants.h"
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

int64_t key_count(const std::vector<int64_t>& extents) {
  return std::accumulate(extents.begin(), extents.end(), int64_t{0});
}

// K and V of one block packed back to back in one flat buffer: K (BH, n, D) then V (BH, n, Dv).
int64_t kv_numel(const Dims& g, int64_t n) { return ops_detail::packed_kv_numel(g.bh, n, g.d, g.dv); }

Tensor pack_kv(const Tensor& k, const Tensor& v, const Dims& g) {
  const int64_t n = k.size(-2);
  Tensor buf = Tensor::empty({kv_numel(g, n)}, k.dtype(), k.device());
  buf.narrow(0, 0, g.bh * n * g.d).view(k.shape()).copy_(k.detach());
  buf.narrow(0, g.bh * n * g.d, g.bh * n * g.dv).view(v.shape()).copy_(v.detach());
  return buf;
}

// Between the two layouts of K/V over all Nk keys: whole, one packed block (K of every key, then V), and by owner,
// each rank's packed block in rank order (what all_gather_v and reduce_scatter_v move). by_owner: whole -> owners.
Tensor regroup_kv(const Tensor& packed, const Dims& g, const std::vector<int64_t>& ek, bool by_owner) {
  const int64_t nk = key_count(ek);
  Tensor regrouped = Tensor::empty({kv_numel(g, nk)}, packed.dtype(), packed.device());
  const Tensor& whole = by_owner ? packed : regrouped;
  const Tensor& owners = by_owner ? regrouped : packed;
  const Tensor kw = whole.narrow(0, 0, g.bh * nk * g.d).view({g.bh, nk, g.d});
  const Tensor vw = whole.narrow(0, g.bh * nk * g.d, g.bh * nk * g.dv).view({g.bh, nk, g.dv});
  int64_t seg = 0, row = 0;
  for (int64_t n : ek) {
    const int64_t kn = g.bh * n * g.d, vn = g.bh * n * g.dv;
    const Tensor ko = owners.narrow(0, seg, kn).view({g.bh, n, g.d});
    const Tensor vo = owners.narrow(0, seg + kn, vn).view({g.bh, n, g.dv});
    if (by_owner) {
      ko.copy_(kw.narrow(1, row, n));
      vo.copy_(vw.narrow(1, row, n));
    } else {
      kw.narrow(1, row, n).copy_(ko);
      vw.narrow(1, row, n).copy_(vo);
    }
    seg += kn + vn;
    row += n;
  }
  return regrouped;
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

// Copies the packed dK/dV of heads [b0, b0 + nb) of a block of nk keys into the packed block of all heads.
void place_heads(const Tensor& gkv, const Tensor& heads_gkv, const Dims& g, int64_t b0, int64_t nb, int64_t nk) {
  const int64_t kn = nb * nk * g.d, vn = nb * nk * g.dv;
  gkv.narrow(0, b0 * nk * g.d, kn).copy_(heads_gkv.narrow(0, 0, kn));
  gkv.narrow(0, g.bh * nk * g.d + b0 * nk * g.dv, vn).copy_(heads_gkv.narrow(0, kn, vn));
}

Tensor neg_inf_like(const Shape& shape, const Tensor& like) {
  return full(shape, -std::numeric_limits<double>::infinity(), {like.dtype(), like.device()});
}

// ---- the sharded-KV context shared by ring, all-gather and the replicated-q fold --------------------------------

struct ShardedKvCtx {
  ShardedKvCtx(Mesh m, int a) : mesh(std::move(m)), axis(a) {}
  Mesh mesh;
  int axis;  // the mesh axis sharding the sequence
  Dims g;
  std::vector<int64_t> ek;  // per-rank key extents
  double scale = 1;
  Shape q_shape, k_shape, v_shape;
  Tensor q, kv, out, lse;  // q contiguous; kv this rank's packed K/V; out and lse the global result (this rank's rows)
  // Autocast's bf16/f16 (autograd/autocast.h), chosen in the forward: every block rounds q, K/V and dout to it as
  // the local op does; what travels stays f32, so the collectives are those of an f32 run.
  std::optional<DType> compute;
};

ShardedKvCtx make_ctx(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double scale, int axis) {
  ShardedKvCtx ctx(q.mesh(), axis);
  ctx.g = dims_of(q.local(), v.local());
  ctx.ek = k.spec().extents(axis);
  ctx.scale = scale;
  ctx.q_shape = q.local().shape();
  ctx.k_shape = k.local().shape();
  ctx.v_shape = v.local().shape();
  ctx.q = q.local().contiguous().detach();
  ctx.kv = pack_kv(k.local(), v.local(), ctx.g);
  ctx.compute = ops_detail::autocast_compute({&q.local(), &k.local(), &v.local()});
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
  Communicator& comm = patch::axis_comm(c.mesh, c.axis);
  const int p = comm.size(), r = comm.rank();
  const Dims& g = c.g;
  Tensor acc = zeros({g.bh, g.nq, g.dv}, {c.q.dtype(), c.q.device()});
  Tensor m = neg_inf_like({g.bh, g.nq}, c.q);
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
    in_slices(g.bh, {&inflight}, [&](int64_t b0, int64_t nb) {
      const ops_detail::AttentionBlock blk = ops_detail::attention_block(kOp, c.q, cur, nk, g.dv, c.scale, {b0, nb},
                                                                         c.compute);
      ops_detail::merge_attention_block(kOp, acc.narrow(0, b0, nb), m.narrow(0, b0, nb), blk);
    });
    if (inflight.pending()) inflight.wait();
    cur = next;
  }
  c.out = acc.view(out_shape(c));
  c.lse = m.view(lse_shape(c));
  return {c.out, c.lse};
}

std::vector<Tensor> ring_backward(ShardedKvCtx& c, const std::vector<Tensor>& grads) {
  Communicator& comm = patch::axis_comm(c.mesh, c.axis);
  const int p = comm.size(), r = comm.rank();
  const Dims& g = c.g;
  const Tensor grad_out = grads[0].contiguous(), grad_lse = grads[1].contiguous();
  Tensor gq = zeros({c.q.numel()}, {c.q.dtype(), c.q.device()});
  const Tensor lse = SHARDRT_MUTANT(ring_local_lse)  // test-only bugs: patches/mutants.h
                         ? ops_detail::attention_block(kOp, c.q, c.kv, c.ek[r], g.dv, c.scale, {}, c.compute).lse
                         : c.lse;
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
    in_slices(g.bh, {&kv_inflight, &g_inflight}, [&](int64_t b0, int64_t nb) {
      const ops_detail::AttentionBlockGrads bg = ops_detail::attention_block_backward(
          kOp, c.q, SHARDRT_MUTANT(ring_reuse_first_kv_block) ? c.kv : cur, nk, c.scale, c.out, lse, grad_out,
          grad_lse, {b0, nb}, c.compute);
      accumulate_into(gq.narrow(0, b0 * g.nq * g.d, nb * g.nq * g.d), bg.q.view({-1}));
      place_heads(g_blk, bg.kv, g, b0, nb, nk);
    });
    if (s > 0) {
      // The accumulator of this block, carrying the grads of the ranks it visited before.
      g_inflight.wait();
      accumulate_into(g_blk, g_recv);
    }
    if (p > 1 && !(s == p - 1 && SHARDRT_MUTANT(ring_skip_dkdv_home_hop))) {  // the mutant: patches/mutants.h
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
  Communicator& comm = patch::axis_comm(c.mesh, c.axis);
  Tensor gathered = Tensor::empty({kv_numel(c.g, key_count(c.ek))}, c.kv.dtype(), c.kv.device());
  {
    auto scope = comm.ledger().scope(label);
    comm.all_gather_v(c.kv, gathered, kv_counts(c));
  }
  return regroup_kv(gathered, c.g, c.ek, /*by_owner=*/false);
}

std::vector<Tensor> all_gather_forward(ShardedKvCtx& c) {
  const Tensor full_kv = gather_kv(c, kForward);
  const ops_detail::AttentionBlock blk =
      ops_detail::attention_block(kOp, c.q, full_kv, key_count(c.ek), c.g.dv, c.scale, {}, c.compute);
  c.out = blk.out.view(out_shape(c));
  c.lse = blk.lse.view(lse_shape(c));
  return {c.out, c.lse};
}

std::vector<Tensor> all_gather_backward(ShardedKvCtx& c, const std::vector<Tensor>& grads) {
  Communicator& comm = patch::axis_comm(c.mesh, c.axis);
  const Tensor grad_out = grads[0].contiguous(), grad_lse = grads[1].contiguous();
  const Tensor full_kv = gather_kv(c, kBackward);
  const ops_detail::AttentionBlockGrads bg = ops_detail::attention_block_backward(
      kOp, c.q, full_kv, key_count(c.ek), c.scale, c.out, c.lse, grad_out, grad_lse, {}, c.compute);
  // Re-pack per owner, then each owner gets the sum over every rank's queries.
  const Tensor packed = regroup_kv(bg.kv, c.g, c.ek, /*by_owner=*/true);
  Tensor mine = Tensor::empty({c.kv.numel()}, packed.dtype(), packed.device());
  {
    auto scope = comm.ledger().scope(kBackward);
    comm.reduce_scatter_v(packed, mine, kv_counts(c));
  }
  return unpack_grads(c, bg.q.view({-1}), mine);
}

// ---- replicated q, sharded K/V: fold the ranks' block results by their LSEs ------------------------------------

std::vector<Tensor> fold_forward(ShardedKvCtx& c) {
  Communicator& comm = patch::axis_comm(c.mesh, c.axis);
  const Dims& g = c.g;
  const int64_t rows = g.bh * g.nq;
  const ops_detail::AttentionBlock blk = ops_detail::attention_block(kOp, c.q, c.kv, c.ek[comm.rank()], g.dv, c.scale, {},
                                                                     c.compute);
  const Tensor neg_inf = ops_detail::scalar_like(c.q, -std::numeric_limits<double>::infinity());
  const Tensor zero = ops_detail::scalar_like(c.q, 0.0);
  auto scope = comm.ledger().scope(kForward);
  Tensor hi = blk.lse.clone();
  comm.all_reduce(hi, ReduceOp::max);
  // [out·w (rows·Dv), w (rows)] with w = exp(lse_b - max over ranks): one sum gives numerator and denominator. A rank
  // with no keys for a row (lse_b = -inf) weighs 0, also where every rank has none (max -inf).
  const Tensor w = where(eq(blk.lse, neg_inf), zero, exp(sub(blk.lse, hi)));
  Tensor packed = Tensor::empty({rows * (g.dv + 1)}, c.q.dtype(), c.q.device());
  packed.narrow(0, 0, rows * g.dv).view({g.bh, g.nq, g.dv}).copy_(mul(w.unsqueeze(-1), blk.out));
  packed.narrow(0, rows * g.dv, rows).view({g.bh, g.nq}).copy_(w);
  comm.all_reduce(packed, ReduceOp::sum);
  const Tensor weighted = packed.narrow(0, 0, rows * g.dv).view({g.bh, g.nq, g.dv});
  const Tensor sum_w = packed.narrow(0, rows * g.dv, rows).view({g.bh, g.nq});
  const Tensor any_keys = gt(sum_w, zero);
  c.lse = where(any_keys, add(hi, log(sum_w)), neg_inf).view(lse_shape(c));
  c.out = where(any_keys.unsqueeze(-1), div(weighted, sum_w.unsqueeze(-1)), zero).view(out_shape(c));
  return {c.out, c.lse};
}

std::vector<Tensor> fold_backward(ShardedKvCtx& c, const std::vector<Tensor>& grads) {
  Communicator& comm = patch::axis_comm(c.mesh, c.axis);
  const Tensor grad_out = grads[0].contiguous(), grad_lse = grads[1].contiguous();
  const ops_detail::AttentionBlockGrads bg = ops_detail::attention_block_backward(
      kOp, c.q, c.kv, c.ek[comm.rank()], c.scale, c.out, c.lse, grad_out, grad_lse, {}, c.compute);
  Tensor gq = bg.q.view({-1});
  // This rank's keys contribute part of every query's grad; dK/dV of its own keys are complete.
  {
    auto scope = comm.ledger().scope(kBackward);
    comm.all_reduce(gq, ReduceOp::sum);
  }
  return unpack_grads(c, gq, bg.kv);
}

// ---- patches -------------------------------------------------------------------------------------------------

// How q and k/v sit on the mesh: at most one axis (the sequence axis) shards the sequence dim of q or of k/v, and
// there the other one is Shard of its sequence dim too or Replicate; on every other axis q and k/v are placed the
// same way, Replicate or Shard of one leading dim (batch, heads) with equal extents, so each rank's leading slice
// of q meets the same slice of k/v and that axis needs no collective. `ok` is false for anything else (Partial,
// the feature dim sharded, two axes on the sequence, q and k/v split apart on a leading dim, different meshes).
struct Layout {
  bool ok = false;
  int seq_axis = -1;  // -1: no axis shards a sequence, every rank computes its own leading slice
  bool q_seq = false, kv_seq = false;  // whether q / k,v are sharded along the sequence axis
};

Layout layout_of(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v) {
  Layout l;
  if (&q.mesh().flat() != &k.mesh().flat() || &q.mesh().flat() != &v.mesh().flat()) return l;
  if (q.spec().any_partial() || k.spec().any_partial() || v.spec().any_partial()) return l;
  if (k.placements() != v.placements() || k.spec().all_extents() != v.spec().all_extents()) return l;
  const int seq = q.dim() - 2;
  for (int m = 0; m < q.mesh().ndim(); ++m) {
    const Placement &pq = q.spec().placement(m), &pk = k.spec().placement(m);
    const bool sq = pq.is_shard(seq), sk = pk.is_shard(seq);
    if (sq || sk) {
      if (l.seq_axis >= 0) return l;
      if ((!sq && !pq.is_replicate()) || (!sk && !pk.is_replicate())) return l;
      l.seq_axis = m, l.q_seq = sq, l.kv_seq = sk;
      continue;
    }
    if (pq != pk) return l;
    if (pq.is_shard() && (pq.dim > seq || q.spec().extents(m) != k.spec().extents(m))) return l;
  }
  l.ok = true;
  return l;
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
  // K/V meet this rank's queries only: their grads are partial over the sequence axis, summed once. K and V are
  // activations, so they are summed whatever the axis' role.
  const int axis = layout_of(q, k, v).seq_axis;
  const std::vector<Tensor> kv = patch::reduce_grads_over(kOp, q.mesh(), {axis}, {k.local(), v.local()});
  const AttentionOutput o = scaled_dot_product_attention(q.local(), kv[0], kv[1], scale);
  return wrap(q, o.out, o.lse);
}

using SkForward = std::vector<Tensor> (*)(ShardedKvCtx&);
using SkBackward = std::vector<Tensor> (*)(ShardedKvCtx&, const std::vector<Tensor>&);

AttentionShardOutput run_sharded_kv(const char* node, SkForward fwd, SkBackward bwd, const ShardTensor& q,
                                    const ShardTensor& k, const ShardTensor& v, double scale) {
  ShardedKvCtx ctx = make_ctx(q, k, v, scale, layout_of(q, k, v).seq_axis);
  const std::vector<Tensor> outs = fwd(ctx);
  // Recorded only when an input needs grad (inference keeps nothing alive). Whether one does is the same on
  // every rank, so every rank records the node and runs the backward's collectives together.
  const std::vector<Tensor> rec =
      record(node, {q.local(), k.local(), v.local()}, outs, std::move(ctx), bwd);
  return wrap(q, rec[0], rec[1]);
}

// The patch for each (q, k/v) pair on the sequence axis.
bool placed(const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, bool has_seq, bool q_seq,
            bool kv_seq) {
  const Layout l = layout_of(q, k, v);
  if (!l.ok || (l.seq_axis >= 0) != has_seq) return false;
  return !has_seq || (l.q_seq == q_seq && l.kv_seq == kv_seq);
}

const std::vector<AttentionPatch>& attention_table() {
  static const std::vector<AttentionPatch> table = {
      {"sdpa/no-sequence-axis",
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double, KvStrategy) {
         return placed(q, k, v, false, false, false);
       },
       run_local},
      {"sdpa/q-sharded-kv-replicated",
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double, KvStrategy) {
         return placed(q, k, v, true, true, false);
       },
       run_q_sharded},
      {"sdpa/q-replicated-kv-sharded",
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double, KvStrategy) {
         return placed(q, k, v, true, false, true);
       },
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double scale, KvStrategy) {
         return run_sharded_kv("scaled_dot_product_attention.kv_sharded", fold_forward, fold_backward, q, k, v, scale);
       }},
      {"sdpa/ring",
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double, KvStrategy s) {
         return s == KvStrategy::ring && placed(q, k, v, true, true, true);
       },
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double scale, KvStrategy) {
         return run_sharded_kv("scaled_dot_product_attention.ring", ring_forward, ring_backward, q, k, v, scale);
       }},
      {"sdpa/all-gather-kv",
       [](const ShardTensor& q, const ShardTensor& k, const ShardTensor& v, double, KvStrategy s) {
         return s == KvStrategy::all_gather && placed(q, k, v, true, true, true);
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
