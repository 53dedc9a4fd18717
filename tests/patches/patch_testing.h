// Helpers shared by the sharded-op (patch) tests: the meshes of this world size, random inputs, extents with
// uneven and zero-size shards, and the parity check plus the exact ledger expectations of each case.
#pragma once
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "mesh/mesh.h"
#include "patches/check_sharded.h"
#include "patches/errors.h"
#include "patches/ops.h"
#include "runtime/factories.h"
#include "tests/support/world.h"

namespace shardrt::test {

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
inline std::vector<std::vector<std::vector<int64_t>>> grid_extents(int64_t len0, int64_t len1) {
  return {{split_extents(len0, 2), split_extents(len1, 2)}, {{0, len0}, split_extents(len1, 2)}};
}

// Normal(0, 1) f64 values, identical on every rank.
inline Tensor rnd(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, {DType::f64}, &gen);
}

// Extents patterns of `len` (pick it prime, so that every split is uneven) over the `n` coordinates of an axis,
// with their names: the split rule; and, when n >= 3, a zero-size shard at coordinate 1 (on 2 ranks a zero-size
// shard leaves the other rank everything, which is not sharding).
struct ExtentsCase {
  std::string name;
  std::vector<int64_t> extents;
};
inline std::vector<ExtentsCase> extents_cases(int64_t len, int n) {
  std::vector<ExtentsCase> cases = {{"uneven", split_extents(len, n)}};
  if (n >= 3) {
    std::vector<int64_t> e = split_extents(len, n - 1);
    e.insert(e.begin() + 1, 0);
    cases.push_back({"zero-size shard", e});
  }
  return cases;
}

// A parity case: full inputs, their placements and (optionally) explicit extents per input; parameters and
// tolerances are set on the result.
inline ShardedCase sharded_case(std::string name, std::vector<Tensor> inputs, std::vector<Placements> placements,
                                std::vector<std::vector<std::vector<int64_t>>> extents = {}) {
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

}  // namespace shardrt::test
