// matmul/bmm patches against the serial fp64 oracle: a sharded on its rows or a batch dim, b replicated (its grad
// all-reduced once per sharded axis) or sharded on the same batch dim (no collective); bad shapes are the local
// op's error for the global tensors, unsupported placements MissingShardPatch.
#include "tests/patches/bad_input_testing.h"

using namespace shardrt;
using namespace shardrt::test;

TEST_CASE("patch matmul: rows sharded, b a plain or Replicate tensor; b's grad reduced once per axis", "[patch]") {
  // a (2, 11, 3) sharded on M; w (3, 4) plain, v (3) plain (a 1-D right operand), r (1, 3, 4) Replicate.
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    return std::vector<ShardTensor>{matmul(in[0], p[0]), matmul(in[0], p[1]), matmul(in[0], in[1]),
                                    bmm(in[0], p[2])};
  };
  const Mesh& line = line_mesh();
  const int pn = line.size();
  for (const ExtentsCase& e : extents_cases(11, pn)) {
    ShardedCase c = sharded_case("matmul rows " + e.name, {rnd({2, 11, 3}, 80), rnd({1, 3, 4}, 81)},
                                 {on_line(S(1)), on_line(R)}, {{e.extents}, {}});
    c.params = {rnd({3, 4}, 82), rnd({3}, 83), rnd({2, 3, 5}, 84)};
    check_patch(line, fn, c,
                {{"matmul.backward", "all_reduce", "domain", 3,
                  all_reduce_bytes(12, 8, pn) + all_reduce_bytes(3, 8, pn) + all_reduce_bytes(12, 8, pn)},
                 {"bmm.backward", "all_reduce", "domain", 1, all_reduce_bytes(30, 8, pn)}});
  }
  if (has_grid())
    for (const auto& ext : grid_extents(5, 7)) {
      // a (5, 7, 3): batch dim on dx, rows on dy; w (3, 4) reduced over both.
      ShardedCase c = sharded_case("matmul 2x2", {rnd({5, 7, 3}, 85)}, {kGridS0S1}, {ext});
      c.params = {rnd({3, 4}, 86)};
      auto fn2 = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
        return std::vector<ShardTensor>{matmul(in[0], p[0])};
      };
      check_patch(grid_mesh(), fn2, c,
                  {{"matmul.backward", "all_reduce", "dx", 1, all_reduce_bytes(12, 8, 2)},
                   {"matmul.backward", "all_reduce", "dy", 1, all_reduce_bytes(12, 8, 2)}});
      CHECK(matmul(distribute(rnd({5, 7, 3}, 85), grid_mesh(), kGridS0S1, ext), rnd({3, 4}, 86)).placements() ==
            kGridS0S1);
    }
}

TEST_CASE("patch matmul/bmm: columns of b sharded, a plain or Replicate; a's grad reduced once per axis",
          "[patch]") {
  // b (3, 11) sharded on N; a plain (2, 5, 3) on the left, and a Replicate (4, 3); bmm with a plain (2, 5, 3) left.
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& p) {
    return std::vector<ShardTensor>{matmul(p[0], in[0]), matmul(in[1], in[0]), bmm(p[0], in[2])};
  };
  const Mesh& line = line_mesh();
  const int pn = line.size();
  for (const ExtentsCase& e : extents_cases(11, pn)) {
    ShardedCase c = sharded_case("matmul columns " + e.name, {rnd({3, 11}, 120), rnd({4, 3}, 121), rnd({2, 3, 11}, 122)},
                                 {on_line(S(1)), on_line(R), on_line(S(2))}, {{e.extents}, {}, {e.extents}});
    c.params = {rnd({2, 5, 3}, 123)};
    check_patch(line, fn, c,
                {{"matmul.backward", "all_reduce", "domain", 2, all_reduce_bytes(30 + 12, 8, pn)},
                 {"bmm.backward", "all_reduce", "domain", 1, all_reduce_bytes(30, 8, pn)}});
  }
  if (has_grid()) {
    // a (5, 3) rows over dx, b (3, 7) columns over dy: a's grad reduced over dy, b's over dx.
    auto fn2 = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
      return std::vector<ShardTensor>{matmul(in[0], in[1])};
    };
    const Mesh& grid = grid_mesh();
    for (const auto& ext : grid_extents(5, 7)) {
      ShardedCase c = sharded_case("matmul rows x columns 2x2", {rnd({5, 3}, 124), rnd({3, 7}, 125)},
                                   {{S(0), R}, {R, S(1)}}, {{ext[0], {}}, {{}, ext[1]}});
      const int64_t my_dx = ext[0][grid.coord("dx")], my_dy = ext[1][grid.coord("dy")];
      const ShardTensor out = matmul(distribute(rnd({5, 3}, 124), grid, {S(0), R}, AxisExtents{ext[0], {}}),
                                     distribute(rnd({3, 7}, 125), grid, {R, S(1)}, AxisExtents{{}, ext[1]}));
      CHECK(out.placements() == kGridS0S1);
      check_patch(grid, fn2, c,
                  {{"matmul.backward", "all_reduce", "dy", 1, all_reduce_bytes(my_dx * 3, 8, 2)},
                   {"matmul.backward", "all_reduce", "dx", 1, all_reduce_bytes(3 * my_dy, 8, 2)}});
    }
  }
}

TEST_CASE("patch matmul/bmm: batch sharded on both operands alike, no collectives", "[patch]") {
  auto fn = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{matmul(in[0], in[1]), bmm(in[0], in[1])};
  };
  const Mesh& line = line_mesh();
  for (const ExtentsCase& e : extents_cases(11, line.size())) {
    ShardedCase c = sharded_case("bmm batch " + e.name, {rnd({11, 2, 3}, 88), rnd({11, 3, 4}, 89)},
                                 {on_line(S(0)), on_line(S(0))}, {{e.extents}, {e.extents}});
    check_patch(line, fn, c, {});
  }
  // A batch broadcast: a (2, 11, 2, 3) sharded on its dim 1, b (11, 3, 4) sharded on its dim 0 (the same output
  // dim), and a broadcast b (1, 3, 4) replicated.
  auto fn2 = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{matmul(in[0], in[1]), matmul(in[0], in[2])};
  };
  const int pn = line.size();
  for (const ExtentsCase& e : extents_cases(11, pn)) {
    ShardedCase c =
        sharded_case("matmul broadcast batch " + e.name, {rnd({2, 11, 2, 3}, 90), rnd({11, 3, 4}, 91), rnd({1, 3, 4}, 92)},
                     {on_line(S(1)), on_line(S(0)), on_line(R)}, {{e.extents}, {e.extents}, {}});
    check_patch(line, fn2, c, {{"matmul.backward", "all_reduce", "domain", 1, all_reduce_bytes(12, 8, pn)}});
  }
}

TEST_CASE("patch matmul/bmm: bad shapes are the local op's error; other placements MissingShardPatch", "[patch]") {
  const Mesh& line = line_mesh();
  const Tensor a = rnd({2, 11, 3}, 93), w = rnd({3, 4}, 94), wk = rnd({4, 4}, 95), b3 = rnd({2, 3, 4}, 96);
  const ShardTensor rows = distribute(a, line, on_line(S(1)));
  const ShardTensor k_sharded = distribute(a, line, on_line(S(2)));
  const ShardTensor batch = distribute(a, line, on_line(S(0)), AxisExtents{split_around_zero(2, line.size())});
  const ShardTensor b_whole = distribute(b3, line, on_line(R));
  const ShardTensor b_cols = distribute(rnd({3, 11}, 97), line, on_line(S(1)));
  const ShardTensor partial = sum(rows, {1}, true);
  check_rejected({
      rejects<ShapeError>("inner dims differ", "matmul: inner dimensions differ", [=] { (void)matmul(rows, wk); },
                          [=] { (void)matmul(a, wk); }),
      rejects<ShapeError>("bmm of a 2-D operand", "bmm: expected (B, M, K) x (B, K, N)",
                          [=] { (void)bmm(rows, w); }, [=] { (void)bmm(a, w); }),
      rejects<MissingShardPatch>("K sharded", "matmul: no patch for placements (S(2))",
                                 [=] { (void)matmul(k_sharded, w); }),
      rejects<MissingShardPatch>("b replicated with a's whole sharded batch dim", "bmm: no patch",
                                 [=] { (void)bmm(batch, b_whole); }),
      rejects<MissingShardPatch>("a's rows and b's columns on the same axis", "matmul: no patch",
                                 [=] { (void)matmul(rows, b_cols); }),
      rejects<MissingShardPatch>("b's K sharded", "matmul: no patch for placements (R) global [2, 5, 11] and (S(0))",
                                 [=] { (void)matmul(rnd({2, 5, 11}, 98), distribute(rnd({11, 4}, 99), line,
                                                                                    on_line(S(0)))); }),
      rejects<MissingShardPatch>("a pending sum", "matmul: no patch", [=] { (void)matmul(partial, w); }),
  });
}
