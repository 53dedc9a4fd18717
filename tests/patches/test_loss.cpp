// Loss patches against the serial fp64 oracle. Losses over sharded data all-reduce their partial sums once per
// sharded axis in forward and run a local backward.
#include <cmath>

#include "tests/patches/bad_input_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

std::vector<ShardTensor> losses(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  return {mse_loss(in[0], in[1]), relative_l2_loss(in[0], in[1])};
}

}  // namespace

TEST_CASE("patch losses: one all-reduce of the partial sums per sharded axis forward, local backward", "[patch]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  const Placements s1 = on_line(Placement::Shard(1));
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c = sharded_case("losses " + e.name, {rnd({2, 11, 3}, 67), rnd({2, 11, 3}, 68)}, {s1, s1},
                                 {{e.extents}, {e.extents}});
    check_patch(line, losses, c,
                {{"mse_loss.forward", "all_reduce", "domain", 1, all_reduce_bytes(1, 8, p)},
                 {"relative_l2_loss.forward", "all_reduce", "domain", 1, all_reduce_bytes(2, 8, p)}});
  }
  if (has_grid())
    for (const auto& ext : grid_extents(5, 7)) {
      ShardedCase c =
          sharded_case("losses 2x2", {rnd({5, 7, 3}, 69), rnd({5, 7, 3}, 70)}, {kGridS0S1, kGridS0S1}, {ext, ext});
      const int64_t b1 = all_reduce_bytes(1, 8, 2), b2 = all_reduce_bytes(2, 8, 2);
      check_patch(grid_mesh(), losses, c,
                  {{"mse_loss.forward", "all_reduce", "dx", 1, b1},
                   {"mse_loss.forward", "all_reduce", "dy", 1, b1},
                   {"relative_l2_loss.forward", "all_reduce", "dx", 1, b2},
                   {"relative_l2_loss.forward", "all_reduce", "dy", 1, b2}});
    }
}

TEST_CASE("patch losses: differing specs or a Partial input are MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor full = rnd({2, 11, 3}, 71);
  const ShardTensor x = distribute(full, line, on_line(Placement::Shard(1)));
  const ShardTensor r = distribute(full, line, on_line(Placement::Replicate()));
  CHECK_THROWS_WITH(mse_loss(x, r), Catch::Contains("mse_loss") && Catch::Contains("S(1)"));
  CHECK_THROWS_AS(relative_l2_loss(r, x), MissingShardPatch);
  const ShardTensor partial = sum(x, {1});
  CHECK_THROWS_AS(mse_loss(partial, partial), MissingShardPatch);
}

namespace {

// Class indices in [0, C) as f64 (check_sharded's inputs are f64; the test casts them to i64).
Tensor class_targets(int64_t n, int64_t C, uint64_t seed) {
  std::vector<double> v = rnd({n}, seed).to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>((static_cast<int64_t>(std::floor(std::fabs(v[i]) * 7)) + static_cast<int64_t>(i)) % C);
  return from_vector(v, {n}, {DType::f64});
}

std::vector<ShardTensor> cross_entropy_fn(const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
  return {cross_entropy(in[0], to_dtype(in[1], DType::i64))};
}

}  // namespace

TEST_CASE("patch cross_entropy: rows sharded, one all-reduce of the packed partial sums, mean over the global N",
          "[patch]") {
  const Mesh& line = line_mesh();
  const int p = line.size();
  for (const ExtentsCase& e : extents_cases(11, p)) {
    ShardedCase c = sharded_case("cross_entropy " + e.name, {rnd({11, 5}, 110), class_targets(11, 5, 111)},
                                 {on_line(S(0)), on_line(S(0))}, {{e.extents}, {e.extents}});
    c.input_requires_grad = {true, false};
    check_patch(line, cross_entropy_fn, c,
                {{"cross_entropy.forward", "all_reduce", "domain", 1, all_reduce_bytes(2, 8, p)}});
  }
  if (has_grid()) {
    // Rows over dx, replicated over dy: the sum is reduced over dx only.
    const Extents rows = split_extents(7, 2);
    ShardedCase c = sharded_case("cross_entropy 2x2", {rnd({7, 4}, 112), class_targets(7, 4, 113)},
                                 {{S(0), R}, {S(0), R}}, {{rows, {}}, {rows, {}}});
    c.input_requires_grad = {true, false};
    check_patch(grid_mesh(), cross_entropy_fn, c,
                {{"cross_entropy.forward", "all_reduce", "dx", 1, all_reduce_bytes(2, 8, 2)}});
  }
}

TEST_CASE("patch cross_entropy: bad targets are one ValueError on every rank; other placements MissingShardPatch",
          "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor logits = rnd({11, 5}, 114);
  const ShardTensor ls = distribute(logits, line, on_line(S(0)));
  const Tensor targets = to_dtype(class_targets(11, 5, 115), DType::i64);
  const ShardTensor ts = distribute(targets, line, on_line(S(0)));
  // One target out of range, on whichever rank holds the last row.
  std::vector<double> bad_v = to_dtype(targets, DType::f64).to_vector();
  bad_v.back() = 5;
  const ShardTensor bad = distribute(to_dtype(from_vector(bad_v, {11}, {DType::f64}), DType::i64), line, on_line(S(0)));
  const ShardTensor tf = distribute(to_dtype(targets, DType::f64), line, on_line(S(0)));
  const ShardTensor by_class = distribute(logits, line, on_line(S(1)));
  const ShardTensor t_rep = distribute(targets, line, on_line(R));
  check_rejected({
      rejects<ValueError>("a target outside [0, C)",
                          "cross_entropy: 1 targets are outside [0, 5) for logits f64[11, 5]",
                          [=] { (void)cross_entropy(ls, bad); }),
      rejects<DTypeError>("f64 targets", "cross_entropy: targets must be i64", [=] { (void)cross_entropy(ls, tf); },
                          [=] { (void)cross_entropy(logits, to_dtype(targets, DType::f64)); }),
      rejects<MissingShardPatch>("class dim sharded", "cross_entropy: no patch for placements (S(1))",
                                 [=] { (void)cross_entropy(by_class, ts); }),
      rejects<MissingShardPatch>("targets replicated against sharded rows", "cross_entropy: no patch",
                                 [=] { (void)cross_entropy(ls, t_rep); }),
  });
  // The job goes on: the same op with good targets (one all_reduce of the 2 packed partial sums, forward only).
  ShardedCase c = sharded_case("cross_entropy after the bad inputs", {logits, to_dtype(targets, DType::f64)},
                               {on_line(S(0)), on_line(S(0))});
  c.input_requires_grad = {true, false};
  check_patch(line, cross_entropy_fn, c,
              {{"cross_entropy.forward", "all_reduce", "domain", 1, all_reduce_bytes(2, 8, line.size())}});
}
