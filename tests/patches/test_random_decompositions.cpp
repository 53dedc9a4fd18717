// Randomised decompositions: hundreds of random per-rank extents (seeded and reproducible, several zeros, zeros
// at the edge coordinates, and on the 2x2 mesh an axis of two with a zero-size shard) through the halo conv,
// pooling, upsampling, pad, ring and all-gather attention, redistribute and the norms, each via check_sharded
// against the serial fp64 oracle. Every rank draws the same numbers (same seed, same generator, checked); the
// seed is printed, and SHARDRT_RANDOM_SEED=<n> replays a run. Where a draw is one the contract refuses
// (reflect/replicate/circular pads next to an empty or too thin edge shard) the refusal is asserted instead:
// MissingShardPatch, the same on every rank. Small tensors, tagged [random].
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

uint64_t run_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("SHARDRT_RANDOM_SEED");
    const uint64_t s = env != nullptr ? std::strtoull(env, nullptr, 10) : 20261201;
    if (world_rank() == 0) std::printf("test_random_decompositions: seed %llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// A generator per test case (seed + the case's salt), so each case replays alone. Only the raw 64-bit engine,
// whose sequence the standard fixes, and our own reductions of it: identical on every rank and platform.
struct Draw {
  explicit Draw(uint64_t salt) : gen(run_seed() * 1000003 + salt) {}
  std::mt19937_64 gen;
  int64_t below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(gen() % static_cast<uint64_t>(n)); }
  int64_t in(int64_t lo, int64_t hi) { return lo + below(hi - lo + 1); }  // [lo, hi]
  bool one_in(int64_t n) { return below(n) == 0; }
};

int64_t largest(const Extents& e) { return *std::max_element(e.begin(), e.end()); }

// n extents summing to len: the split rule; random cuts (zeros where cuts coincide); a zero forced at an edge
// coordinate; or several zeros. With `split`, every rank holds less than len (when n > 1), so the decomposition
// really shards; without, one rank may hold everything (a zero-size shard on an axis of two).
Extents random_extents(Draw& d, int64_t len, int n, bool split) {
  REQUIRE((!split || n == 1 || len >= 2));  // one slice cannot be split: the draw would never end
  for (;;) {
    Extents e;
    const int64_t mode = d.below(4);
    if (mode == 0) {
      e = split_extents(len, n);
    } else {
      std::vector<int64_t> cuts;
      for (int j = 0; j + 1 < n; ++j) cuts.push_back(d.below(len + 1));
      std::sort(cuts.begin(), cuts.end());
      int64_t prev = 0;
      for (int64_t c : cuts) e.push_back(c - prev), prev = c;
      e.push_back(len - prev);
      if (mode == 2 && n > 1) {  // an empty edge coordinate: its slices go to its one neighbour
        const int edge = d.one_in(2) ? 0 : n - 1, next = edge == 0 ? 1 : n - 2;
        e[next] += e[edge];
        e[edge] = 0;
      }
      if (mode == 3)  // several zeros: each coordinate but one gives its slices away with probability 1/2
        for (int j = 0; j < n; ++j) {
          const int to = static_cast<int>(d.below(n));
          if (to != j && d.one_in(2)) e[to] += e[j], e[j] = 0;
        }
    }
    if (!split || n == 1 || largest(e) < len) return e;
  }
}

// Every rank drew the same extents: a mismatch would make the parity check meaningless (and likely hang).
void check_same_draw(const std::vector<Extents>& all) {
  int64_t h = 17;
  for (const Extents& e : all)
    for (int64_t v : e) h = h * 31 + v;
  int64_t lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  REQUIRE(lo == hi);
}

std::string ext_str(const Extents& e) {
  std::string s = "[";
  for (size_t j = 0; j < e.size(); ++j) s += (j ? "," : "") + std::to_string(e[j]);
  return s + "]";
}

// Cases per test: many where the mesh has several ranks, a few on one rank (nothing random to draw there).
int trials(int many) { return world_size() == 1 ? 3 : many; }

void check_case(const Mesh& mesh, const ShardedFn& fn, const ShardedCase& c) {
  if (world_rank() == 0) std::printf("random case: %s\n", c.name.c_str());  // named before it runs: a hang shows where
  std::fflush(stdout);
  const ShardedCheckResult r = check_sharded(mesh, fn, c);
  INFO("seed " << run_seed() << ", " << r.report);
  CHECK(r.ok);
}

ShardedFn one(std::function<ShardTensor(const ShardTensor&, const std::vector<Tensor>&)> f) {
  return [f](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    return std::vector<ShardTensor>{f(in[0], p)};
  };
}

struct ConvCfg {
  int64_t k, pad, dil;
};
const ConvCfg kConvCfgs[] = {{3, 1, 1}, {3, 0, 1}, {5, 2, 1}, {3, 2, 2}, {1, 0, 1}};

}  // namespace

TEST_CASE("random decompositions: halo conv1d, conv2d on 2x2", "[patch][random]") {
  Draw d(1);
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (int t = 0; t < trials(40); ++t) {
    const ConvCfg cfg = kConvCfgs[d.below(5)];
    const int64_t reach = cfg.dil * (cfg.k - 1) + 1;
    const int64_t len = std::max<int64_t>(reach - 2 * cfg.pad, 2) + d.below(9);
    const Extents e = random_extents(d, len, p, true);
    check_same_draw({e});
    ShardedCase c = sharded_case("conv1d k" + std::to_string(cfg.k) + " p" + std::to_string(cfg.pad) + " d" +
                                     std::to_string(cfg.dil) + " L " + std::to_string(len) + " extents " + ext_str(e),
                                 {rnd({1, 2, len}, 100 + t)}, {on_line(S(2))}, {{e}});
    c.params = {rnd({2, 2, cfg.k}, 200 + t), rnd({2}, 300 + t)};
    check_case(line, one([cfg](const ShardTensor& x, const std::vector<Tensor>& w) {
                 return conv(x, w[0], w[1], {1}, {cfg.pad}, {cfg.dil});
               }),
               c);
  }
  if (!has_grid()) return;
  for (int t = 0; t < 25; ++t) {
    const ConvCfg cfg = kConvCfgs[d.below(4)];
    const int64_t reach = cfg.dil * (cfg.k - 1) + 1, base = std::max<int64_t>(reach - 2 * cfg.pad, 2);
    const int64_t h = base + d.below(6), w = base + d.below(6);
    // One axis may leave a rank everything (an axis of two with a zero-size shard); the other really splits.
    const bool dx_splits = d.one_in(2);
    const Extents eh = random_extents(d, h, 2, dx_splits), ew = random_extents(d, w, 2, !dx_splits);
    check_same_draw({eh, ew});
    ShardedCase c = sharded_case("conv2d 2x2 k" + std::to_string(cfg.k) + " p" + std::to_string(cfg.pad) + " d" +
                                     std::to_string(cfg.dil) + " H " + ext_str(eh) + " W " + ext_str(ew),
                                 {rnd({1, 2, h, w}, 400 + t)}, {{S(2), S(3)}}, {{eh, ew}});
    c.params = {rnd({2, 2, cfg.k, cfg.k}, 500 + t), rnd({2}, 600 + t)};
    check_case(grid_mesh(), one([cfg](const ShardTensor& x, const std::vector<Tensor>& wb) {
                 return conv(x, wb[0], wb[1], {1}, {cfg.pad}, {cfg.dil});
               }),
               c);
  }
}

TEST_CASE("random decompositions: halo pooling and kernel == stride pooling", "[patch][random]") {
  Draw d(2);
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (int t = 0; t < trials(30); ++t) {
    const bool is_max = d.one_in(2);
    const int64_t k = d.one_in(2) ? 3 : 5, pad = d.below(k / 2 + 1);
    const int64_t len = std::max<int64_t>(k - 2 * pad, 2) + d.below(9);
    const Extents e = random_extents(d, len, p, true);
    check_same_draw({e});
    ShardedCase c = sharded_case(std::string(is_max ? "max" : "avg") + "_pool k" + std::to_string(k) + " p" +
                                     std::to_string(pad) + " extents " + ext_str(e),
                                 {rnd({1, 2, len}, 700 + t)}, {on_line(S(2))}, {{e}});
    check_case(line, one([=](const ShardTensor& x, const std::vector<Tensor>&) {
                 return is_max ? max_pool(x, {k}, {1}, {pad}) : avg_pool(x, {k}, {1}, {pad});
               }),
               c);
  }
  // kernel == stride: every extent a multiple of the stride (zeros included).
  for (int t = 0; t < trials(15); ++t) {
    const int64_t s = d.in(2, 3), blocks = d.in(1, 6);
    Extents e = random_extents(d, blocks, p, p > 1 && blocks > 1);
    if (p > 1 && largest(e) == blocks) continue;  // one block cannot be split
    for (int64_t& v : e) v *= s;
    check_same_draw({e});
    const std::string name = "avg_pool k=s=" + std::to_string(s) + " extents " + ext_str(e);
    const Tensor x = rnd({1, 2, blocks * s}, 800 + t);
    auto op = [s](const ShardTensor& in, const std::vector<Tensor>&) { return avg_pool(in, {s}, {s}, {0}); };
    // Zero-size shards included: they take the general window path.
    check_case(line, one(op), sharded_case(name, {x}, {on_line(S(2))}, {{e}}));
  }
}

TEST_CASE("random decompositions: nearest and linear upsampling", "[patch][random]") {
  Draw d(3);
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (int t = 0; t < trials(30); ++t) {
    const bool linear = d.one_in(2);
    const int64_t f = d.in(2, 3), len = d.in(2, 10);
    const Extents e = random_extents(d, len, p, true);
    check_same_draw({e});
    ShardedCase c = sharded_case(std::string(linear ? "linear" : "nearest") + " x" + std::to_string(f) + " extents " +
                                     ext_str(e),
                                 {rnd({1, 2, len}, 900 + t)}, {on_line(S(2))}, {{e}});
    check_case(line, one([=](const ShardTensor& x, const std::vector<Tensor>&) {
                 return linear ? upsample_linear(x, {f * len}) : upsample_nearest(x, {f * len});
               }),
               c);
  }
  if (!has_grid()) return;
  for (int t = 0; t < 15; ++t) {
    const bool linear = d.one_in(2), dx_splits = d.one_in(2);
    const int64_t h = d.in(2, 6), w = d.in(2, 6);
    const Extents eh = random_extents(d, h, 2, dx_splits), ew = random_extents(d, w, 2, !dx_splits);
    check_same_draw({eh, ew});
    ShardedCase c = sharded_case(std::string(linear ? "bilinear" : "nearest") + " 2x2 H " + ext_str(eh) + " W " +
                                     ext_str(ew),
                                 {rnd({1, 2, h, w}, 1000 + t)}, {{S(2), S(3)}}, {{eh, ew}});
    check_case(grid_mesh(), one([=](const ShardTensor& x, const std::vector<Tensor>&) {
                 return linear ? upsample_linear(x, {2 * h, 2 * w}) : upsample_nearest(x, {2 * h, 2 * w});
               }),
               c);
  }
}

TEST_CASE("random decompositions: pad, every mode; refused draws are MissingShardPatch", "[patch][random]") {
  Draw d(4);
  const Mesh& line = line_mesh();
  const int p = line.size();
  const PadMode modes[] = {PadMode::constant, PadMode::replicate, PadMode::reflect, PadMode::circular};
  for (int t = 0; t < trials(40); ++t) {
    const PadMode mode = modes[d.below(4)];
    const int64_t lo = d.below(3), hi = d.below(3), len = d.in(3, 10);
    const Extents e = random_extents(d, len, p, true);
    check_same_draw({e});
    // The contract's table (patches/pool_upsample_pad.cpp), from the extents alone.
    bool accepted = true;
    if (mode == PadMode::replicate) accepted = (lo == 0 || e.front() > 0) && (hi == 0 || e.back() > 0);
    if (mode == PadMode::reflect) accepted = (lo == 0 || e.front() > lo) && (hi == 0 || e.back() > hi);
    if (mode == PadMode::circular) accepted = e.back() >= lo && e.front() >= hi;
    const char* names[] = {"constant", "reflect", "replicate", "circular"};
    const std::string name = std::string("pad ") + names[static_cast<int>(mode)] + " (" + std::to_string(lo) + ", " +
                             std::to_string(hi) + ") extents " + ext_str(e);
    const Tensor x = rnd({1, 2, len}, 1100 + t);
    auto op = [=](const ShardTensor& s, const std::vector<Tensor>&) { return pad(s, {lo, hi}, mode, 0.25); };
    INFO(name << (accepted ? " (accepted)" : " (refused)"));
    if (accepted) {
      check_case(line, one(op), sharded_case(name, {x}, {on_line(S(2))}, {{e}}));
    } else {
      bool refused = false;
      try {
        (void)op(distribute(x, line, on_line(S(2)), AxisExtents{e}), {});
      } catch (const MissingShardPatch&) {
        refused = true;
      }
      CHECK(refused);
      CHECK(same_on_every_rank(refused));
    }
  }
}

TEST_CASE("random decompositions: ring and all-gather attention", "[patch][random]") {
  Draw d(5);
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (int t = 0; t < trials(40); ++t) {
    const int64_t nq = d.in(2, 9), nk = d.in(2, 9);
    const bool q_splits = d.one_in(2);
    // q and k/v decomposed independently; one of them really splits, the other may leave a rank everything.
    const Extents eq = random_extents(d, nq, p, q_splits), ek = random_extents(d, nk, p, !q_splits);
    const KvStrategy strategy = d.one_in(2) ? KvStrategy::ring : KvStrategy::all_gather;
    check_same_draw({eq, ek});
    const ShardedCase c =
        sharded_case(std::string(strategy == KvStrategy::ring ? "ring" : "all-gather") + " q " + ext_str(eq) + " kv " +
                         ext_str(ek),
                     {rnd({1, 2, nq, 3}, 1200 + t), rnd({1, 2, nk, 3}, 1300 + t), rnd({1, 2, nk, 2}, 1400 + t)},
                     {on_line(S(2)), on_line(S(2)), on_line(S(2))}, {{eq}, {ek}, {ek}});
    check_case(line,
               [strategy](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
                 const AttentionShardOutput o = scaled_dot_product_attention(in[0], in[1], in[2], 0.7, strategy);
                 return std::vector<ShardTensor>{o.out, o.lse};
               },
               c);
  }
}

TEST_CASE("random decompositions: redistribute between random and split extents", "[patch][random]") {
  Draw d(6);
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (int t = 0; t < trials(30); ++t) {
    const int64_t rows = d.in(2, 9), cols = d.in(1, 5);
    const Extents e = random_extents(d, rows, p, true);
    const bool to_replicate = d.one_in(2);
    check_same_draw({e});
    const Placements to = on_line(to_replicate ? R : S(1));
    const ShardedCase c = sharded_case("redistribute S(0) " + ext_str(e) + " -> " + placements_str(to),
                                       {rnd({rows, cols}, 1500 + t)}, {on_line(S(0))}, {{e}});
    // mul by 2 after the hop keeps the output differentiable through a non-trivial op on the new layout.
    check_case(line, one([to](const ShardTensor& x, const std::vector<Tensor>&) {
                 return mul_scalar(redistribute(x, to), 2.0);
               }),
               c);
  }
  if (!has_grid()) return;
  const Placements targets[] = {{S(1), S(0)}, {R, S(0)}, {S(0), R}, {R, R}};
  for (int t = 0; t < 15; ++t) {
    const int64_t rows = d.in(2, 7), cols = d.in(2, 7);
    const bool dx_splits = d.one_in(2);
    const Extents e0 = random_extents(d, rows, 2, dx_splits), e1 = random_extents(d, cols, 2, !dx_splits);
    const Placements to = targets[d.below(4)];
    check_same_draw({e0, e1});
    const ShardedCase c =
        sharded_case("redistribute 2x2 " + ext_str(e0) + " x " + ext_str(e1) + " -> " + placements_str(to),
                     {rnd({rows, cols}, 1600 + t)}, {kGridS0S1}, {{e0, e1}});
    check_case(grid_mesh(), one([to](const ShardTensor& x, const std::vector<Tensor>&) {
                 return mul_scalar(redistribute(x, to), 2.0);
               }),
               c);
  }
}

TEST_CASE("random decompositions: layer_norm and group_norm statistics over random extents", "[patch][random]") {
  Draw d(7);
  const Mesh& line = line_mesh();
  const int p = line.size();
  auto affine = [](const Shape& s, uint64_t seed) {
    return std::vector<Tensor>{add_scalar(mul_scalar(rnd(s, seed), 0.1), 1.0), mul_scalar(rnd(s, seed + 1), 0.1)};
  };
  for (int t = 0; t < trials(25); ++t) {
    const int64_t cols = d.in(2, 9);
    const Extents e = random_extents(d, cols, p, true);
    check_same_draw({e});
    ShardedCase c = sharded_case("layer_norm normalised dim " + ext_str(e), {rnd({2, cols}, 1700 + t)},
                                 {on_line(S(1))}, {{e}});
    c.params = affine({cols}, 1800 + 2 * t);
    check_case(line, one([cols](const ShardTensor& x, const std::vector<Tensor>& w) {
                 return layer_norm(x, {cols}, w[0], w[1]);
               }),
               c);
  }
  for (int t = 0; t < trials(25); ++t) {
    // Spatial dim sharded (statistics merged), or the batch dim (statistics local, the affine grads reduced).
    const bool batch = p > 2 && d.one_in(3);
    const int64_t n = batch ? d.in(2, 6) : d.in(1, 2), s = d.in(2, 8);
    const Extents e = random_extents(d, batch ? n : s, p, true);
    check_same_draw({e});
    ShardedCase c = sharded_case(std::string("group_norm ") + (batch ? "batch " : "spatial ") + ext_str(e),
                                 {add_scalar(rnd({n, 4, s}, 1900 + t), 2.0)}, {on_line(S(batch ? 0 : 2))}, {{e}});
    c.params = affine({4}, 2000 + 2 * t);
    check_case(line, one([](const ShardTensor& x, const std::vector<Tensor>& w) {
                 return group_norm(x, 2, w[0], w[1]);
               }),
               c);
  }
  if (!has_grid()) return;
  for (int t = 0; t < 10; ++t) {
    // Batch over dx (a zero-size batch shard likely), spatial over dy.
    const int64_t n = d.in(1, 4), s = d.in(2, 7);
    const Extents eb = random_extents(d, n, 2, false), es = random_extents(d, s, 2, true);
    check_same_draw({eb, es});
    ShardedCase c = sharded_case("group_norm 2x2 batch " + ext_str(eb) + " spatial " + ext_str(es),
                                 {rnd({n, 4, s}, 2100 + t)}, {{S(0), S(2)}}, {{eb, es}});
    c.params = affine({4}, 2200 + 2 * t);
    check_case(grid_mesh(), one([](const ShardTensor& x, const std::vector<Tensor>& w) {
                 return group_norm(x, 2, w[0], w[1]);
               }),
               c);
  }
}
