// Helpers shared by the core patches tests (spec, construction, redistribute, check_sharded): the meshes a world
// size allows, distinct test values, windows of global tensors, and the extents patterns (even, uneven,
// zero-size) every transition is checked on.
#pragma once
#include <catch2/catch.hpp>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "mesh/mesh.h"
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

// ddp x domain grids for this world size: 2x2 on 4 ranks, 1x2 and 2x1 on 2, 1x3 and 3x1 on 3, 1x1 on 1.
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
    default:
      return {{world_size(), 1}};
  }
}

inline Mesh grid(std::pair<int, int> g, std::shared_ptr<CommLedger> ledger = nullptr) {
  return Mesh(MPI_COMM_WORLD, g.first, g.second, with_ledger(std::move(ledger)));
}

// 1, 2, 3, ... in row-major order: every element distinct and nonzero, so a misplaced one shows.
inline Tensor iota(const Shape& shape, DType dtype = DType::f64) {
  return arange(1, static_cast<double>(shape_numel(shape)) + 1, 1, {dtype}).reshape(shape);
}

inline Tensor random_like_shape(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, {DType::f64}, &gen);
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
inline std::vector<int64_t> zero_extents(int n) {
  if (n == 1) return {2};
  std::vector<int64_t> e(n);
  for (int j = 0; j < n; ++j) e[j] = j % 2 == 0 ? 0 : j + 1;
  return e;
}

// `len` over n ranks with a zero-size shard at coordinate 1 that still leaves the data split between at least
// two ranks (n >= 3); on fewer ranks, split_extents.
inline std::vector<int64_t> split_around_zero(int64_t len, int n) {
  if (n < 3) return split_extents(len, n);
  std::vector<int64_t> e = split_extents(len, n - 1);
  e.insert(e.begin() + 1, 0);
  return e;
}

inline int64_t total(const std::vector<int64_t>& e) { return std::accumulate(e.begin(), e.end(), int64_t{0}); }

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

}  // namespace shardrt::test
