// Sharded attention on ddp x domain meshes: the batch or the heads over ddp (no collective there), the sequence
// over domain with each of the four q / k,v pairs (and both strategies for S, S), against the serial fp64 oracle
// with the exact collectives of each rank on the domain axis. Runs on every grid of the world size, the 2x3 and
// 3x2 meshes included (ctest entry patches_np6), a zero-size batch slice where ddp does not divide the batch.
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// q (B, H, Nq, D), k (B, H, Nk, D), v (B, H, Nk, Dv).
constexpr int64_t kB = 2, kH = 3, kNq = 7, kNk = 8, kD = 3, kDv = 2;
constexpr const char* kFwd = "scaled_dot_product_attention.forward";
constexpr const char* kBwd = "scaled_dot_product_attention.backward";
const Placement kSeq = S(2);

struct Pair {
  const char* name;
  bool q_seq, kv_seq;
  KvStrategy strategy;
};
const Pair kPairs[] = {{"R,R", false, false, KvStrategy::ring},
                       {"S,R", true, false, KvStrategy::ring},
                       {"R,S", false, true, KvStrategy::ring},
                       {"S,S ring", true, true, KvStrategy::ring},
                       {"S,S all-gather", true, true, KvStrategy::all_gather}};

// The collectives of this rank on the domain axis (P ranks, coordinate r), bh its batch x heads slice, nq its query
// rows, ek the key extents along domain; f64.
std::vector<ExpectedComm> domain_comms(const Pair& pr, int p, int r, int64_t bh, int64_t nq, const Extents& ek) {
  // On a domain axis of one rank the collectives still run (0 bytes), except the ring's, which has no steps.
  if (!(pr.q_seq || pr.kv_seq) || (p == 1 && pr.q_seq && pr.kv_seq && pr.strategy == KvStrategy::ring)) return {};
  auto kv = [&](int64_t n) { return bh * n * (kD + kDv) * 8; };
  const int64_t nk = total(ek);
  if (pr.q_seq && !pr.kv_seq) return {{kBwd, "all_reduce", "domain", 1, kv(nk) * (p - 1)}};
  if (!pr.q_seq)
    return {{kFwd, "all_reduce", "domain", 2, bh * nq * 8 * (p - 1) + bh * nq * (kDv + 1) * 8 * (p - 1)},
            {kBwd, "all_reduce", "domain", 1, bh * nq * kD * 8 * (p - 1)}};
  if (pr.strategy == KvStrategy::ring) {
    const int64_t next = ek[(r + 1) % p];
    return {{kFwd, "ring_shift", "domain", p - 1, kv(nk - next)},
            {kBwd, "ring_shift", "domain", 2 * p - 1, kv(nk - next) + kv(nk)}};
  }
  return {{kFwd, "all_gather_v", "domain", 1, kv(ek[r]) * (p - 1)},
          {kBwd, "all_gather_v", "domain", 1, kv(ek[r]) * (p - 1)},
          {kBwd, "reduce_scatter_v", "domain", 1, kv(nk - ek[r])}};
}

}  // namespace

TEST_CASE("patch attention 2-D: batch or heads over ddp, the sequence over domain, every q / k,v pair",
          "[patch][attention][np6]") {
  for (auto g : grids()) {
    if (g.first == 1 && g.second == 1 && world_size() > 1) continue;
    const Mesh mesh = grid(g, std::make_shared<CommLedger>());
    const int p = g.second, r = mesh.coords()[1];
    for (int lead : {0, 1}) {  // batch or heads over ddp
      const int64_t lead_size = lead == 0 ? kB : kH;
      const Extents lead_ext = split_extents(lead_size, g.first);
      const int64_t bh = (lead == 0 ? lead_ext[mesh.coords()[0]] * kH : kB * lead_ext[mesh.coords()[0]]);
      // Uneven query and key extents on domain, a zero-size key shard where there are 3 ranks.
      const Extents eq = split_extents(kNq, p), ek = split_around_zero(kNk, p);
      for (const Pair& pr : kPairs) {
        if (g.first == 1 && !(pr.q_seq || pr.kv_seq)) continue;  // nothing would be sharded
        const Placement lead_p = g.first > 1 ? S(lead) : R;
        const Placements qp = {lead_p, pr.q_seq ? kSeq : R}, kp = {lead_p, pr.kv_seq ? kSeq : R};
        auto extents = [&](bool seq, const Extents& e) {
          return AxisExtents{g.first > 1 ? lead_ext : Extents{}, seq ? e : Extents{}};
        };
        ShardedCase c = sharded_case(
            std::string("attention 2-D ") + pr.name + (lead == 0 ? ", batch" : ", heads") + " over ddp",
            {rnd({kB, kH, kNq, kD}, 11), rnd({kB, kH, kNk, kD}, 12), rnd({kB, kH, kNk, kDv}, 13)}, {qp, kp, kp},
            {extents(pr.q_seq, eq), extents(pr.kv_seq, ek), extents(pr.kv_seq, ek)});
        const KvStrategy strategy = pr.strategy;
        const ShardedFn fn = [strategy](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
          const AttentionShardOutput o = scaled_dot_product_attention(in[0], in[1], in[2], 0.7, strategy);
          CHECK(o.out.placements() == in[0].placements());
          return std::vector<ShardTensor>{o.out, o.lse};
        };
        const int64_t nq = pr.q_seq ? eq[r] : kNq;
        check_patch(mesh, fn, c, domain_comms(pr, p, r, bh, nq, pr.kv_seq ? ek : Extents{kNk}));
      }
    }
  }
}
