// Sharded attention against the serial fp64 oracle, out and lse both compared with every input grad, for the four
// placement combinations of §2.1 and both sharded-K/V strategies (ring, all-gather-KV), with Nq != Nk, uneven
// extents and a zero-size shard, scale 1/sqrt(D) and 1; then the exact collectives of each strategy, and
// MissingShardPatch for placements no patch takes.
#include <cmath>

#include "autograd/engine.h"
#include "autograd/tape.h"
#include "runtime/allocator.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// q (B, H, Nq, D), k (B, H, Nk, D), v (B, H, Nk, Dv).
constexpr int64_t kB = 2, kH = 2, kNq = 11, kNk = 13, kD = 3, kDv = 4, kBH = kB * kH;
constexpr const char* kFwd = "scaled_dot_product_attention.forward";
constexpr const char* kBwd = "scaled_dot_product_attention.backward";

std::vector<Tensor> qkv(uint64_t seed, DType dtype = DType::f64) {
  return {rnd({kB, kH, kNq, kD}, seed).to(dtype), rnd({kB, kH, kNk, kD}, seed + 1).to(dtype),
          rnd({kB, kH, kNk, kDv}, seed + 2).to(dtype)};
}

ShardedFn attention_fn(double scale, KvStrategy strategy) {
  return [scale, strategy](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    const AttentionShardOutput o = scaled_dot_product_attention(in[0], in[1], in[2], scale, strategy);
    return std::vector<ShardTensor>{o.out, o.lse};
  };
}

// Attention shards the sequence dim, dim 2 of (B, H, N, D).
const Placement kSeq = S(2);

// Bytes of n keys' packed K/V block in f64.
int64_t kv_bytes(int64_t n, int64_t itemsize = 8) { return kBH * n * (kD + kDv) * itemsize; }

std::vector<ExpectedComm> ring_comms(const std::vector<int64_t>& ek, int p, int r, int64_t itemsize = 8) {
  if (p == 1) return {};
  const int64_t n = total(ek), next = ek[(r + 1) % p];
  return {{kFwd, "ring_shift", "domain", p - 1, kv_bytes(n - next, itemsize)},
          {kBwd, "ring_shift", "domain", 2 * p - 1, kv_bytes(n - next, itemsize) + kv_bytes(n, itemsize)}};
}

std::vector<ExpectedComm> all_gather_comms(const std::vector<int64_t>& ek, int p, int r) {
  return {{kFwd, "all_gather_v", "domain", 1, kv_bytes(ek[r]) * (p - 1)},
          {kBwd, "all_gather_v", "domain", 1, kv_bytes(ek[r]) * (p - 1)},
          {kBwd, "reduce_scatter_v", "domain", 1, kv_bytes(total(ek) - ek[r])}};
}

const double kScales[] = {1.0 / std::sqrt(double(kD)), 1.0};

}  // namespace

TEST_CASE("patch attention: q and kv replicated is the local op, no collectives", "[patch][attention]") {
  const Mesh& line = line_mesh();
  const std::vector<Tensor> in = qkv(100);
  if (line.size() == 1) {  // on more ranks nothing is sharded, which check_sharded rejects as vacuous
    check_patch(line, attention_fn(0.5, KvStrategy::ring),
                sharded_case("sdpa R,R", in, {on_line(R), on_line(R), on_line(R)}), {});
  }
  line.flat().ledger().reset();
  const AttentionShardOutput o = scaled_dot_product_attention(distribute(in[0], line, on_line(R)),
                                                              distribute(in[1], line, on_line(R)),
                                                              distribute(in[2], line, on_line(R)), 0.5);
  const AttentionOutput ref = scaled_dot_product_attention(in[0], in[1], in[2], 0.5);
  CHECK(o.out.local().to_vector() == ref.out.to_vector());
  CHECK(o.lse.local().to_vector() == ref.lse.to_vector());
  CHECK(line.flat().ledger().total_calls() == 0);
}

TEST_CASE("patch attention: q sharded, kv replicated; dK/dV summed once in backward", "[patch][attention]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const int64_t kv_numel = kBH * kNk * (kD + kDv);
  for (double scale : kScales)
    for (const ExtentsCase& e : extents_cases(kNq, p))
      check_patch(line, attention_fn(scale, KvStrategy::ring),
                  sharded_case("sdpa S,R " + e.name, qkv(110), {on_line(kSeq), on_line(R), on_line(R)},
                               {{e.extents}, {}, {}}),
                  {{kBwd, "all_reduce", "domain", 1, all_reduce_bytes(kv_numel, 8, p)}});
}

TEST_CASE("patch attention: q replicated, kv sharded; blocks folded by their LSEs", "[patch][attention]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const int64_t rows = kBH * kNq;
  for (double scale : kScales)
    for (const ExtentsCase& e : extents_cases(kNk, p))
      check_patch(line, attention_fn(scale, KvStrategy::ring),
                  sharded_case("sdpa R,S " + e.name, qkv(120), {on_line(R), on_line(kSeq), on_line(kSeq)},
                               {{}, {e.extents}, {e.extents}}),
                  {{kFwd, "all_reduce", "domain", 2,
                    all_reduce_bytes(rows, 8, p) + all_reduce_bytes(rows * (kDv + 1), 8, p)},
                   {kBwd, "all_reduce", "domain", 1, all_reduce_bytes(rows * kD, 8, p)}});
}

TEST_CASE("patch attention: q and kv sharded, ring and all-gather-KV", "[patch][attention]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  const std::vector<ExtentsCase> eq = extents_cases(kNq, p), ek = extents_cases(kNk, p);
  for (double scale : kScales)
    for (size_t i = 0; i < eq.size(); ++i)
      for (size_t j = 0; j < ek.size(); ++j) {
        const std::string name = " q " + eq[i].name + ", kv " + ek[j].name;
        const ShardedCase c =
            sharded_case("sdpa S,S" + name, qkv(130 + i + 2 * j), {on_line(kSeq), on_line(kSeq), on_line(kSeq)},
                         {{eq[i].extents}, {ek[j].extents}, {ek[j].extents}});
        check_patch(line, attention_fn(scale, KvStrategy::ring), c, ring_comms(ek[j].extents, p, r));
        check_patch(line, attention_fn(scale, KvStrategy::all_gather), c, all_gather_comms(ek[j].extents, p, r));
      }
}

TEST_CASE("patch attention: sequences longer than the kernel's 64-row blocks", "[patch][attention]") {
  // Each rank's block spans several kernel tiles, so online-softmax merges inside a block and LSE merges across
  // ranks compose.
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  const int64_t nq = 149, nk = 151;
  const std::vector<Tensor> in = {rnd({1, 2, nq, kD}, 145), rnd({1, 2, nk, kD}, 146), rnd({1, 2, nk, kDv}, 147)};
  const std::vector<int64_t> ek = split_extents(nk, p);
  const ShardedCase c = sharded_case("sdpa S,S long", in, {on_line(kSeq), on_line(kSeq), on_line(kSeq)});
  std::vector<ExpectedComm> ring;
  if (p > 1) {
    const int64_t kv = 2 * (kD + kDv) * 8;  // bytes per key of the packed K/V block (B*H = 2, f64)
    ring = {{kFwd, "ring_shift", "domain", p - 1, kv * (nk - ek[(r + 1) % p])},
            {kBwd, "ring_shift", "domain", 2 * p - 1, kv * (nk - ek[(r + 1) % p]) + kv * nk}};
  }
  check_patch(line, attention_fn(1.0 / std::sqrt(double(kD)), KvStrategy::ring), c, ring);
}

TEST_CASE("patch attention: f32 inputs merge and reduce in f32", "[patch][attention]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), r = line.rank();
  const std::vector<int64_t> ek = split_extents(kNk, p);
  ShardedCase c = sharded_case("sdpa ring f32", qkv(140, DType::f32), {on_line(kSeq), on_line(kSeq), on_line(kSeq)});
  c.atol = c.rtol = 1e-5;  // f32 against the f64 oracle
  check_patch(line, attention_fn(0.5, KvStrategy::ring), c, ring_comms(ek, p, r, 4));
  c.name = "sdpa all-gather f32";
  check_patch(line, attention_fn(0.5, KvStrategy::all_gather), c,
              {{kFwd, "all_gather_v", "domain", 1, kv_bytes(ek[r], 4) * (p - 1)},
               {kBwd, "all_gather_v", "domain", 1, kv_bytes(ek[r], 4) * (p - 1)},
               {kBwd, "reduce_scatter_v", "domain", 1, kv_bytes(kNk - ek[r], 4)}});
  ShardedCase fold = sharded_case("sdpa R,S f32", qkv(141, DType::f32), {on_line(R), on_line(kSeq), on_line(kSeq)});
  fold.atol = fold.rtol = 1e-5;
  const int64_t rows = kBH * kNq;
  check_patch(line, attention_fn(0.5, KvStrategy::ring), fold,
              {{kFwd, "all_reduce", "domain", 2,
                all_reduce_bytes(rows, 4, p) + all_reduce_bytes(rows * (kDv + 1), 4, p)},
               {kBwd, "all_reduce", "domain", 1, all_reduce_bytes(rows * kD, 4, p)}});
}

TEST_CASE("patch attention: all-Replicate on the 2x2 mesh is the local op", "[patch][attention]") {
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  const std::vector<Tensor> in = qkv(160);
  grid.flat().ledger().reset();
  const AttentionShardOutput o =
      scaled_dot_product_attention(distribute(in[0], grid, {R, R}), distribute(in[1], grid, {R, R}),
                                   distribute(in[2], grid, {R, R}), 1.0, KvStrategy::all_gather);
  const AttentionOutput ref = scaled_dot_product_attention(in[0], in[1], in[2], 1.0);
  CHECK(o.out.local().to_vector() == ref.out.to_vector());
  CHECK(o.lse.placements() == Placements{R, R});
  CHECK(grid.flat().ledger().total_calls() == 0);
}

TEST_CASE("patch attention: unsupported placements are MissingShardPatch", "[patch][attention]") {
  const Mesh& line = line_mesh();
  const std::vector<Tensor> in = qkv(150);
  const ShardTensor q = distribute(in[0], line, on_line(kSeq)), k = distribute(in[1], line, on_line(kSeq)),
                    v = distribute(in[2], line, on_line(kSeq));
  // Partial input.
  const ShardTensor partial =
      from_local(in[1], line, on_line(Placement::Partial()), std::nullopt, {.allow_partial = true});
  CHECK_THROWS_AS(scaled_dot_product_attention(q, partial, v, 1.0), MissingShardPatch);
  CHECK_THROWS_AS(scaled_dot_product_attention(from_local(in[0], line, on_line(Placement::Partial()), std::nullopt,
                                                             {.allow_partial = true}),
                                                  k, v, 1.0),
                  MissingShardPatch);
  // Sharded along the feature dim D.
  const ShardTensor q_d = distribute(in[0], line, on_line(Placement::Shard(3)));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q_d, k, v, 1.0),
                    Catch::Contains("scaled_dot_product_attention") && Catch::Contains("S(3)"));
  // Sharded along heads.
  CHECK_THROWS_AS(scaled_dot_product_attention(distribute(in[0], line, on_line(Placement::Shard(1))), k, v, 1.0),
                  MissingShardPatch);
  // k and v placed differently.
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, distribute(in[2], line, on_line(R)), 1.0), MissingShardPatch);
  // Mismatched shapes are a ShapeError, not a patch question.
  CHECK_THROWS_AS(scaled_dot_product_attention(q, distribute(rnd({kB, kH, kNk, kD + 1}, 1), line, on_line(kSeq)), v, 1.0),
                  ShapeError);
  if (has_grid()) {
    // The sequence over two axes (q's over one, k/v's over the other), and q and k/v split apart on the batch.
    const Mesh& g = grid_mesh();
    const ShardTensor gk = distribute(in[1], g, {R, kSeq}), gv = distribute(in[2], g, {R, kSeq});
    CHECK_THROWS_AS(scaled_dot_product_attention(distribute(in[0], g, {kSeq, R}), gk, gv, 1.0), MissingShardPatch);
    CHECK_THROWS_AS(scaled_dot_product_attention(distribute(in[0], g, {S(0), kSeq}), gk, gv, 1.0),
                    MissingShardPatch);
  }
}

TEST_CASE("patch attention: ring attention's memory per rank is O(N/P)", "[patch][attention]") {
  // Forward + backward on this rank's slices only; the allocator's peak above what was allocated before (inputs and
  // the grad seeds) must stay within a fixed number of local K/V blocks, whatever P is. All-gather-KV, which holds
  // the whole K/V, is the control that shows the measurement sees O(N) buffers.
  const Mesh& line = line_mesh();
  const int p = line.size();
  constexpr int64_t kLocal = 24, kHeads = 2, kDim = 8;
  const std::vector<int64_t> ext(static_cast<size_t>(p), kLocal);
  const int64_t block = kHeads * kLocal * 2 * kDim * 8;  // bytes of one local K/V block, f64
  auto peak_above = [&](KvStrategy s) {
    Tensor q = rnd({1, kHeads, kLocal, kDim}, 170 + line.rank()), k = rnd({1, kHeads, kLocal, kDim}, 180 + line.rank()),
           v = rnd({1, kHeads, kLocal, kDim}, 190 + line.rank());
    set_requires_grad(q);
    set_requires_grad(k);
    set_requires_grad(v);
    const Tensor gout = rnd({1, kHeads, kLocal, kDim}, 200), glse = rnd({1, kHeads, kLocal}, 201);
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    reset_peak_memory(Device::cpu());
    {
      const Placements seq = {kSeq};
      const AttentionShardOutput o =
          scaled_dot_product_attention(from_local(q, line, seq, {{ext}}), from_local(k, line, seq, {{ext}}),
                                       from_local(v, line, seq, {{ext}}), 1.0, s);
      backward({o.out.local(), o.lse.local()}, {gout, glse});
    }
    return memory_stats(Device::cpu()).peak_bytes - before;
  };
  const int64_t ring = peak_above(KvStrategy::ring), gathered = peak_above(KvStrategy::all_gather);
  INFO("P " << p << ": ring peak " << ring << " B, all-gather peak " << gathered << " B, local K/V block " << block
            << " B");
  CHECK(ring <= 10 * block);
  if (p >= 3) CHECK(gathered > ring);
  if (p >= 4) CHECK(gathered >= 2 * p * block);
}
