// Helpers shared by the patches tests: the meshes a world size allows (1-D, ddp x domain grids, the 2x2 mesh),
// distinct and random test values, windows of global tensors, the extents patterns (even, uneven, zero-size)
// every transition and sharded op is checked on, and the parity check of a sharded op against the serial fp64
// oracle plus the exact ledger expectations of each case.
#pragma once
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "mesh/mesh.h"
#include "patches/check_sharded.h"
#include "patches/errors.h"
#include "patches/ops.h"
#include "patches/shard_spec.h"
#include "patches/shard_tensor.h"
#include "runtime/factories.h"
#include "tests/support/world.h"

namespace shardrt::test {

// Short placement names, as the tests write layouts: {S(0), R}, {P}.
inline const Placement R = Placement::Replicate();
inline const Placement P = Placement::Partial();
inline Placement S(int d) { return Placement::Shard(d); }

// Every rank reached `ok` the same way: the min and max over the world agree.
inline bool same_on_every_rank(bool ok) {
  int mine = ok ? 1 : 0, lo = 0, hi = 0;
  MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

inline CommOptions with_ledger(std::shared_ptr<CommLedger> ledger) {
  CommOptions o;
  o.ledger = std::move(ledger);
  return o;
}

inline Mesh world_1d(std::shared_ptr<CommLedger> ledger = nullptr) {
  return Mesh::one_d(MPI_COMM_WORLD, "domain", with_ledger(std::move(ledger)));
}

// ddp x domain grids for this world size: 2x2 on 4 ranks, 2x3 and 3x2 on 6, 1x2 and 2x1 on 2, 1x3 and 3x1 on 3,
// 1x1 on 1.
inline std::vector<std::pair<int, int>> grids() {
  switch (world_size()) {
    case 1:
      return {{1, 1}};
    case 2:
      return {{1, 2}, {2, 1}};
    case 3:
      return {{1, 3}, {3, 1}};
    case 4:
      return {{2, 2}};
    case 6:
      return {{2, 3}, {3, 2}};
    default:
      return {{world_size(), 1}};
  }
}

inline Mesh grid(std::pair<int, int> g, std::shared_ptr<CommLedger> ledger = nullptr) {
  return Mesh(MPI_COMM_WORLD, g.first, g.second, with_ledger(std::move(ledger)));
}

// 1, 2, 3, ... in row-major order: every element distinct and nonzero, so a misplaced one shows.
// Normal(0, 1) f64 values, identical on every rank.
inline Tensor rnd(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, {DType::f64}, &gen);
}

inline Tensor iota(const Shape& shape, DType dtype = DType::f64) {
  return arange(1, static_cast<double>(shape_numel(shape)) + 1, 1, {dtype}).reshape(shape);
}

// The window of a global tensor that this rank holds under `spec`.
inline Tensor window(const Tensor& full, const ShardSpec& spec) {
  Tensor w = full;
  for (int m = 0; m < spec.mesh().ndim(); ++m)
    if (spec.placement(m).is_shard())
      w = w.narrow(spec.placement(m).dim, spec.offset(m), spec.extents(m)[spec.mesh().coords()[m]]);
  return w;
}

// A leaf holding this rank's window of `full` (its grad is this rank's slice), wrapped with `spec`'s layout.
inline ShardTensor leaf_shard(const Tensor& full, const ShardSpec& spec) {
  Tensor local = window(full, spec).clone();
  set_requires_grad(local);
  return from_local(local, spec.mesh(), spec.placements(), spec.all_extents());
}

// Extents of `n` ranks with zero-size shards: every even coordinate holds nothing (one rank: all of 2).
inline Extents zero_extents(int n) {
  if (n == 1) return {2};
  Extents e(n);
  for (int j = 0; j < n; ++j) e[j] = j % 2 == 0 ? 0 : j + 1;
  return e;
}

// `len` over n ranks with a zero-size shard at coordinate 1 that still leaves the data split between at least
// two ranks (n >= 3); on fewer ranks, split_extents.
inline Extents split_around_zero(int64_t len, int n) {
  if (n < 3) return split_extents(len, n);
  Extents e = split_extents(len, n - 1);
  e.insert(e.begin() + 1, 0);
  return e;
}

// Element-wise equality (exact), with the first difference in the failure message.
#define CHECK_SAME_VALUES(got, want)                                               \
  do {                                                                             \
    const Tensor g_ = (got), w_ = (want);                                          \
    REQUIRE(g_.shape() == w_.shape());                                             \
    const std::vector<double> a_ = g_.to_vector(), b_ = w_.to_vector();            \
    std::size_t i_ = 0;                                                            \
    while (i_ < a_.size() && a_[i_] == b_[i_]) ++i_;                               \
    INFO("first difference at element " << i_ << " of " << shape_str(g_.shape())); \
    CHECK(i_ == a_.size());                                                        \
  } while (0)


// Each test mesh has a ledger of its own, so the counts a test reads are those of the mesh under test.
inline CommOptions own_ledger() {
  CommOptions o;
  o.ledger = std::make_shared<CommLedger>();
  return o;
}

// The 1-D mesh over the world (axis "domain"), built once, collectively, by the first test that asks.
inline const Mesh& line_mesh() {
  static const Mesh m = Mesh::one_d(MPI_COMM_WORLD, "domain", own_ledger());
  return m;
}

// The 2x2 mesh (axes "dx", "dy") on 4 ranks; call only when has_grid().
inline bool has_grid() { return world_size() == 4; }
inline const Mesh& grid_mesh() {
  static const Mesh m(MPI_COMM_WORLD, {"dx", "dy"}, {2, 2}, own_ledger());
  return m;
}

// On the 2x2 mesh: dim 0 sharded over "dx", dim 1 over "dy".
inline const Placements kGridS0S1 = {Placement::Shard(0), Placement::Shard(1)};

// Grid extents of two sharded dims (len0 over "dx", len1 over "dy"): uneven, and a zero-size shard on dx.
inline std::vector<AxisExtents> grid_extents(int64_t len0, int64_t len1) {
  return {{split_extents(len0, 2), split_extents(len1, 2)}, {{0, len0}, split_extents(len1, 2)}};
}

// Extents patterns of `len` (pick it prime, so that every split is uneven) over the `n` coordinates of an axis,
// with their names: the split rule; and, when n >= 3, a zero-size shard at coordinate 1 (on 2 ranks a zero-size
// shard leaves the other rank everything, which is not sharding).
struct ExtentsCase {
  std::string name;
  Extents extents;
};
inline std::vector<ExtentsCase> extents_cases(int64_t len, int n) {
  std::vector<ExtentsCase> cases = {{"uneven", split_extents(len, n)}};
  if (n >= 3) cases.push_back({"zero-size shard", split_around_zero(len, n)});
  return cases;
}

// A parity case: full inputs, their placements and (optionally) explicit extents per input; parameters and
// tolerances are set on the result.
inline ShardedCase sharded_case(std::string name, std::vector<Tensor> inputs, std::vector<Placements> placements,
                                std::vector<AxisExtents> extents = {}) {
  ShardedCase c;
  c.name = std::move(name);
  c.inputs = std::move(inputs);
  c.placements = std::move(placements);
  c.extents = std::move(extents);
  return c;
}

// One expected ledger line: collectives issued under `scope`, of `kind`, on mesh axis `axis`.
struct ExpectedComm {
  std::string scope, kind, axis;
  int64_t calls = 0, bytes = 0;
};

// all_reduce bytes sent by one rank (mesh/ledger.h): the buffer's bytes times P - 1.
inline int64_t all_reduce_bytes(int64_t numel, int64_t itemsize, int p) { return numel * itemsize * (p - 1); }

// Every ledger line outside the harness' own scope ("check_sharded") must be one of `want`, with its exact calls
// and bytes, and every line of `want` must be there: a hidden collective shows up as an extra line.
inline void check_ledger(const Mesh& mesh, const std::vector<ExpectedComm>& want) {
  std::vector<LedgerEntry> got;
  for (const LedgerEntry& e : mesh.flat().ledger().entries())
    if (e.calls > 0 && e.scope.rfind("check_sharded", 0) != 0) got.push_back(e);
  std::string expected;
  for (const ExpectedComm& w : want)
    expected += w.scope + " " + w.kind + " " + w.axis + " calls " + std::to_string(w.calls) + " bytes " +
                std::to_string(w.bytes) + "\n";
  INFO("rank " << world_rank() << " ledger:\n" << mesh.flat().ledger().table() << "expected:\n" << expected);
  bool same = got.size() == want.size();
  for (const ExpectedComm& w : want) {
    bool found = false;
    for (const LedgerEntry& e : got)
      found = found || (e.scope == w.scope && e.kind == w.kind && e.axis == w.axis && e.calls == w.calls &&
                        e.bytes_sent == w.bytes);
    same = same && found;
  }
  CHECK(same);
}

// The parity check of one case against the serial fp64 oracle, then the case's exact collectives.
inline void check_patch(const Mesh& mesh, const ShardedFn& fn, const ShardedCase& c,
                        const std::vector<ExpectedComm>& comms) {
  mesh.flat().ledger().reset();
  const ShardedCheckResult r = check_sharded(mesh, fn, c);
  INFO(r.report);
  CHECK(r.ok);
  check_ledger(mesh, comms);
}

// The placements of a 1-D mesh: one placement.
inline Placements on_line(Placement p) { return {p}; }

// Bytes rank `r` of `p` sends in one halo exchange of `h` slices to each existing neighbour.
inline int64_t halo_bytes(int r, int p, int64_t h, int64_t slice_bytes) {
  return h * slice_bytes * ((r > 0 ? 1 : 0) + (r < p - 1 ? 1 : 0));
}

}  // namespace shardrt::test
