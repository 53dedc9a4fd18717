// Indexing along a sharded dim with global indices (index_select, gather_global, scatter_add_global) against the
// serial fp64 oracle on 1-D and 2x2 meshes with uneven and zero-size shards, and the exact collectives: rows
// routed to and from their owners with all_to_all_v.
#include "mesh/agree.h"
#include "tests/patches/patch_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

int coord(const Mesh& m, const char* axis) { return m.axis(axis).rank(); }

Tensor i64(const std::vector<int64_t>& v, const Shape& shape) {
  std::vector<double> d(v.begin(), v.end());
  return from_vector(d, shape, {DType::i64});
}

int owner(const Extents& ext, int64_t g) {
  int64_t end = 0;
  for (size_t j = 0; j < ext.size(); ++j)
    if (g < (end += ext[j])) return static_cast<int>(j);
  return -1;
}

// Rows of the requests `req[r]` of every coordinate r: (rows this coordinate `me` serves to others, rows it asks
// of others), given the owners' extents.
std::pair<int64_t, int64_t> traffic(const std::vector<std::vector<int64_t>>& req, const Extents& ext,
                                    int me) {
  int64_t served = 0, asked = 0;
  for (size_t r = 0; r < req.size(); ++r)
    for (int64_t g : req[r]) {
      if (g < 0) continue;
      const int o = owner(ext, g);
      if (static_cast<int>(r) != me && o == me) ++served;
      if (static_cast<int>(r) == me && o != me) ++asked;
    }
  return {served, asked};
}

// The windows of a flat index list split by `ext`.
std::vector<std::vector<int64_t>> windows(const std::vector<int64_t>& idx, const Extents& ext,
                                          int64_t per_row = 1) {
  std::vector<std::vector<int64_t>> w;
  int64_t at = 0;
  for (int64_t e : ext) {
    w.emplace_back(idx.begin() + at * per_row, idx.begin() + (at + e) * per_row);
    at += e;
  }
  return w;
}

}  // namespace

// ---- index_select --------------------------------------------------------------------------------------------

TEST_CASE("patch index_select: global indices along the sharded dim, one all_to_all_v each way", "[index]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), me = coord(line, "domain");
  const std::vector<int64_t> idx = {10, 0, 3, 3, 7, 1, 9, 2, 5};  // duplicates, any order
  const Tensor index = i64(idx, {9});
  const std::vector<int64_t> out_ext = split_extents(9, p);
  for (const ExtentsCase& e : extents_cases(11, p)) {
    auto rows = [&](int dim) {
      return [index, dim](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
        return std::vector<ShardTensor>{index_select(in[0], dim, index)};
      };
    };
    const auto [served, asked] = traffic(windows(idx, out_ext), e.extents, me);
    ShardedCase c = sharded_case("index_select S(0) " + e.name, {rnd({11, 3}, 70)}, {on_line(Placement::Shard(0))},
                                 {{e.extents}});
    check_patch(line, rows(0), c,
                {{"index_select.forward", "all_to_all_v", "domain", 1, served * 3 * 8},
                 {"index_select.backward", "all_to_all_v", "domain", 1, asked * 3 * 8}});
    ShardedCase d = sharded_case("index_select S(1) " + e.name, {rnd({2, 11, 3}, 71)}, {on_line(Placement::Shard(1))},
                                 {{e.extents}});
    check_patch(line, rows(1), d,
                {{"index_select.forward", "all_to_all_v", "domain", 1, served * 6 * 8},
                 {"index_select.backward", "all_to_all_v", "domain", 1, asked * 6 * 8}});
  }
  // Along an unsharded dim: the local op, no collective.
  auto cols = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{index_select(in[0], 1, i64({2, 0, 2}, {3}))};
  };
  check_patch(line, cols, sharded_case("index_select unsharded dim", {rnd({11, 3}, 72)}, {on_line(Placement::Shard(0))}),
              {});
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  const std::vector<int64_t> gidx = {6, 0, 6, 2, 5};
  auto fn = [gidx](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{index_select(in[0], 1, i64(gidx, {5}))};
  };
  for (const auto& ext : grid_extents(5, 7)) {
    ShardedCase c = sharded_case("index_select 2x2", {rnd({5, 7, 3}, 73)}, {{Placement::Shard(0), Placement::Shard(1)}},
                                 {ext});
    const auto [served, asked] = traffic(windows(gidx, split_extents(5, 2)), ext[1], coord(grid, "dy"));
    const int64_t f = ext[0][coord(grid, "dx")] * 3;
    check_patch(grid, fn, c,
                {{"index_select.forward", "all_to_all_v", "dy", 1, served * f * 8},
                 {"index_select.backward", "all_to_all_v", "dy", 1, asked * f * 8}});
  }
}

// ---- gather_global / scatter_add_global ----------------------------------------------------------------------

namespace {

// Neighbour-like index (7, 2) with padding entries (-1), values in [0, 11).
const std::vector<int64_t> kNbr = {10, 0, 3, -1, 3, 7, 1, 9, -1, -1, 2, 5, 6, 6};

ShardTensor nbr_index(const Mesh& mesh, const Placements& pl) { return distribute(i64(kNbr, {7, 2}), mesh, pl); }

// The collectives of gather_global / scatter_add_global on the routing axis: `asked` requests to other ranks,
// `fwd_rows` / `bwd_rows` rows of f f64 elements sent to other ranks in forward / backward.
std::vector<ExpectedComm> routing_comms(const std::string& op, const char* axis, int p, int64_t asked,
                                        int64_t fwd_rows, int64_t bwd_rows, int64_t f) {
  return {{op + ".forward", "agree", axis, 1, p - 1},
          {op + ".forward", "all_to_all", axis, 1, 8 * (p - 1)},
          {op + ".forward", "all_to_all_v", axis, 2, 8 * asked + fwd_rows * f * 8},
          {op + ".backward", "all_to_all_v", axis, 1, bwd_rows * f * 8}};
}

}  // namespace

TEST_CASE("patch gather_global / scatter_add_global: sharded index, grads routed to the owners", "[index]") {
  const Mesh& line = line_mesh();
  const int p = line.size(), me = coord(line, "domain");
  const std::vector<int64_t> q_ext = split_extents(7, p);
  auto gather = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{gather_global(in[0], 0, nbr_index(in[0].mesh(), {Placement::Shard(0)}))};
  };
  auto scatter = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{
        scatter_add_global(in[0], 0, nbr_index(in[0].mesh(), in[1].placements()), in[1])};
  };
  for (const ExtentsCase& e : extents_cases(11, p)) {
    const auto [served, asked] = traffic(windows(kNbr, q_ext, 2), e.extents, me);
    ShardedCase g = sharded_case("gather_global " + e.name, {rnd({11, 3}, 80)}, {on_line(Placement::Shard(0))},
                                 {{e.extents}});
    check_patch(line, gather, g, routing_comms("gather_global", "domain", p, asked, served, asked, 3));
    ShardedCase s = sharded_case("scatter_add_global " + e.name, {rnd({11, 3}, 81), rnd({7, 2, 3}, 82)},
                                 {on_line(Placement::Shard(0)), on_line(Placement::Shard(0))}, {{e.extents}, {q_ext}});
    check_patch(line, scatter, s,
                routing_comms("scatter_add_global", "domain", p, asked, asked, served, 3));
  }
  // A replicated index: the output is Replicate; gather's backward and scatter's forward need no row traffic
  // (each owner uses its own copy of the complete grad / src).
  auto gather_rep = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{gather_global(in[0], 0, nbr_index(in[0].mesh(), {Placement::Replicate()}))};
  };
  for (const ExtentsCase& e : extents_cases(11, p)) {
    const auto [served, asked] = traffic(std::vector<std::vector<int64_t>>(p, kNbr), e.extents, me);
    ShardedCase g = sharded_case("gather_global replicated index " + e.name, {rnd({11, 3}, 84)},
                                 {on_line(Placement::Shard(0))}, {{e.extents}});
    std::vector<ExpectedComm> gw = routing_comms("gather_global", "domain", p, asked, served, 0, 3);
    gw.pop_back();
    check_patch(line, gather_rep, g, gw);
    ShardedCase s = sharded_case("scatter_add_global replicated index " + e.name, {rnd({11, 3}, 85), rnd({7, 2, 3}, 86)},
                                 {on_line(Placement::Shard(0)), on_line(Placement::Replicate())}, {{e.extents}, {}});
    std::vector<ExpectedComm> sw = routing_comms("scatter_add_global", "domain", p, asked, 0, served, 3);
    sw[2] = {"scatter_add_global.forward", "all_to_all_v", "domain", 1, 8 * asked};  // the indices only
    check_patch(line, scatter, s, sw);
  }
  if (!has_grid()) return;
  // Points over dx, the index (queries) over dy: routing on dx, output sharded on dy.
  const Mesh& grid = grid_mesh();
  auto gather2 = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{
        gather_global(in[0], 0, nbr_index(in[0].mesh(), {Placement::Replicate(), Placement::Shard(0)}))};
  };
  std::vector<std::vector<int64_t>> req(2);
  const std::vector<int64_t> mine = windows(kNbr, split_extents(7, 2), 2)[coord(grid, "dy")];
  req[0] = req[1] = mine;  // along dx both ranks hold the same index window
  for (const std::vector<int64_t>& x_ext : {split_extents(11, 2), std::vector<int64_t>{2, 9}}) {
    const auto [served, asked] = traffic(req, x_ext, coord(grid, "dx"));
    ShardedCase g = sharded_case("gather_global 2x2", {rnd({11, 3}, 83)}, {{Placement::Shard(0), Placement::Replicate()}},
                                 {{x_ext, {}}});
    // x is replicated over dy where the index is sharded: its grad is all-reduced over dy once.
    // The index is replicated along dx: no backward all_to_all_v (each owner uses its own copy of the grad).
    std::vector<ExpectedComm> want = routing_comms("gather_global", "dx", 2, asked, served, asked, 3);
    want.pop_back();
    want.push_back({"gather_global.backward", "all_reduce", "dy", 1,
                    all_reduce_bytes(x_ext[coord(grid, "dx")] * 3, 8, 2)});
    check_patch(grid, gather2, g, want);
  }
}

TEST_CASE("patch index: unsupported placements are MissingShardPatch, bad indices ValueError", "[index]") {
  const Mesh& line = line_mesh();
  const ShardTensor spatial = distribute(rnd({2, 4, 5}, 91), line, on_line(Placement::Shard(2)));
  const ShardTensor partial = sum(spatial, {2}, true);
  CHECK_THROWS_AS(index_select(partial, 0, i64({0}, {1})), MissingShardPatch);
  const ShardTensor x = distribute(rnd({11, 3}, 92), line, on_line(Placement::Shard(0)));
  CHECK_THROWS_AS(index_select(x, 0, i64({11}, {1})), ValueError);
  // An index sharded along a dim other than 0 has no patch.
  const ShardTensor bad_index = distribute(i64(kNbr, {2, 7}), line, on_line(Placement::Shard(1)));
  CHECK_THROWS_WITH(gather_global(x, 0, bad_index), Catch::Contains("gather_global"));
  // A sum into a replicated x from an index sharded over the same axis would be partial: no patch.
  const ShardTensor x_rep = distribute(rnd({11, 3}, 93), line, on_line(Placement::Replicate()));
  const ShardTensor idx_sharded = nbr_index(line, on_line(Placement::Shard(0)));
  const ShardTensor src = distribute(rnd({7, 2, 3}, 94), line, on_line(Placement::Shard(0)));
  CHECK_THROWS_AS(scatter_add_global(x_rep, 0, idx_sharded, src), MissingShardPatch);
  // An out-of-range value known to one rank only: every rank throws the same error (agreed), nobody hangs.
  std::vector<int64_t> v = kNbr;
  v.back() = 11;
  const ShardTensor out_of_range = distribute(i64(v, {7, 2}), line, on_line(Placement::Shard(0)));
  CHECK_THROWS_AS(gather_global(x, 0, out_of_range), ValueError);
}

// ---- configurations the contract accepts, each with its exact collectives (issue 9) ----------------------------

TEST_CASE("patch scatter_add_global on the 2x2 mesh: rows routed on dx, replicated over dy", "[index]") {
  if (!has_grid()) return;
  const Mesh& grid = grid_mesh();
  const int cx = coord(grid, "dx");
  // x, the index and src all Shard(0) over dx and Replicate over dy: every dy coordinate routes the same rows on
  // its own dx pair; nothing travels on dy (x's output and src's grad are complete on each copy).
  auto scatter = [](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{
        scatter_add_global(in[0], 0, nbr_index(in[0].mesh(), in[1].placements()), in[1])};
  };
  const Placements rows = {S(0), R};
  for (const Extents& x_ext : {split_extents(11, 2), Extents{2, 9}, Extents{0, 11}}) {
    const auto [served, asked] = traffic(windows(kNbr, split_extents(7, 2), 2), x_ext, cx);
    ShardedCase s = sharded_case("scatter_add_global 2x2 x " + std::to_string(x_ext[0]) + "|" +
                                     std::to_string(x_ext[1]),
                                 {rnd({11, 3}, 95), rnd({7, 2, 3}, 96)}, {rows, rows}, {{x_ext, {}}, {}});
    check_patch(grid, scatter, s, routing_comms("scatter_add_global", "dx", 2, asked, asked, served, 3));
  }
  // An index sharded over dy, where x is Replicate: the sum would be partial there, no patch.
  const ShardTensor x = distribute(rnd({11, 3}, 97), grid, rows);
  const ShardTensor idx = nbr_index(grid, {R, S(0)});
  const ShardTensor src = distribute(rnd({7, 2, 3}, 98), grid, {R, S(0)});
  CHECK_THROWS_AS(scatter_add_global(x, 0, idx, src), MissingShardPatch);
}
