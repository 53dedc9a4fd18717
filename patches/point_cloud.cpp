// kNN and radius search (ball query with a maximum neighbour count) with sharded points.
//
// Accepted placements: points (Np, D) Shard(0) on at most one mesh axis A and Replicate on every other axis;
//   queries (Nq, D) Shard(0) or Replicate on every axis; same mesh, same float dtype, same D. Partial, a sharded
//   coordinate dim, or points sharded on two axes -> MissingShardPatch. k / max_points >= 1, radius >= 0.
// Output: index (i64), distance (points' dtype) of global shape (Nq, k) and count (i64, (Nq)), all with the
//   queries' placements and per-rank extents (computed locally). Order: by distance (compared as exact f64
//   squared distances), then by global point index; padding index -1 / distance +inf / not counted.
// Points replicated on every axis: the local search, no collective.
// Points Shard(0) on A: a ring over the P point shards of A. At step s this rank holds the block of coordinate
//   (me - s) mod P, whose global offset (prefix sum of the spec's extents) and size are known locally, so only the
//   coordinates travel — nothing else is shifted. The next block's ring_shift_async is in flight while the current
//   one is searched; each step merges the block into every query's running best list (insertion into a sorted
//   list of at most k entries), so the results never exceed O(Nq_local * k).
// The block search (kernels/cpu/neighbor_search.h), NeighborSearch::kdtree by default: a KD-tree (nanoflann) over
//   the block, built only when some local query needs it: a query skips the block when the distance from it to
//   the block's bounding box exceeds its bound (radius search: the radius; knn: its current k-th distance once
//   it has k), which no point of the block could beat — exact, so the results are those of the brute force
//   (NeighborSearch::brute_force, every query against every point) bit for bit, on any mesh. Cost per block:
//   O(n log n) to build, about O(log n + k) per query searching it, instead of O(Nq_local * n).
//   The ring still moves every block, also one that every local query skips: whether a rank needs a block is
//   known only where that rank holds its queries, and the rank passing the block on needs it for its neighbour's
//   neighbour, so skipping a transfer would take an agreement collective; the ring_shift count is unchanged.
// Forward collectives (points sharded, P > 1): P - 1 ring_shift on A under "knn.forward" /
//   "radius_search.forward"; step s sends the block of coordinate (me - s) mod P: bytes = sum over s = 0..P-2 of
//   extent[(me - s) mod P] * D * itemsize (every block but the one this rank would receive back).
// Backward: none (integer results; distances are not differentiable here). Features are gathered with
//   gather_neighbor_features = gather_global (patches/index.cpp): its backward scatter-adds into the owners.
// Memory per rank: two point blocks (current and in flight), O(Np / P * D), plus the results O(Nq_local * k).
// On CUDA (points and queries on one device): the same ring, the blocks searched on the device by
//   kernels/cuda/neighbor_search.h (brute force, the same lists bit for bit, so `method` changes nothing there);
//   the running lists stay on the device and are read back once at the end to form the padded outputs.

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "autograd/ops/common.h"
#include "kernels/cpu/neighbor_search.h"
#include "kernels/cuda/neighbor_search.h"
#include "runtime/cuda_context.h"
#include "patches/dispatch.h"
#include "patches/ops.h"
#include "patches/patch_util.h"

namespace shardrt {

namespace {

struct SearchParams {
  const char* op;
  int64_t k;
  double radius2;  // +inf for knn
  NeighborSearch method;
};

// Per query, its best (squared distance, global index) pairs, sorted, at most k.
using Best = kernels::cpu::NeighborLists;

std::vector<double> host_f64(const Tensor& t) {
  const Tensor h = t.detach().to(Device::cpu()).to(DType::f64).contiguous();
  const double* p = h.data<double>();
  return std::vector<double>(p, p + h.numel());
}

// Merges the points block (global indices from `offset`) into `best` with the chosen method; both give the same
// lists bit for bit (kernels/cpu/neighbor_search.h).
void search_block(Best& best, const std::vector<double>& q, const std::vector<double>& pts, int64_t d,
                  int64_t offset, const SearchParams& sp) {
  const int64_t np = d == 0 ? 0 : static_cast<int64_t>(pts.size()) / d;
  if (sp.method == NeighborSearch::brute_force)
    kernels::cpu::merge_block_brute(best, q.data(), pts.data(), np, d, offset, sp.k, sp.radius2);
  else
    kernels::cpu::merge_block_indexed(best, q.data(), pts.data(), np, d, offset, sp.k, sp.radius2);
}

Neighbors results(const Best& best, const ShardTensor& points, const ShardTensor& queries, const SearchParams& sp) {
  const int64_t nq = static_cast<int64_t>(best.size()), k = sp.k;
  Tensor idx = Tensor::empty({nq, k}, DType::i64, Device::cpu());
  Tensor dist = Tensor::empty({nq, k}, DType::f64, Device::cpu());
  Tensor cnt = Tensor::empty({nq}, DType::i64, Device::cpu());
  int64_t* pi = idx.data<int64_t>();
  double* pd = dist.data<double>();
  int64_t* pc = cnt.data<int64_t>();
  for (int64_t i = 0; i < nq; ++i) {
    const auto& list = best[i];
    pc[i] = static_cast<int64_t>(list.size());
    for (int64_t j = 0; j < k; ++j) {
      const bool valid = j < static_cast<int64_t>(list.size());
      pi[i * k + j] = valid ? list[j].second : -1;
      pd[i * k + j] = valid ? std::sqrt(list[j].first) : std::numeric_limits<double>::infinity();
    }
  }
  const Device dev = points.device();
  const ShardSpec& qs = queries.spec();
  const ShardSpec pair_spec = qs.with(qs.placements(), {queries.global_shape()[0], k}, qs.all_extents(), sp.op);
  const ShardSpec count_spec = qs.with(qs.placements(), {queries.global_shape()[0]}, qs.all_extents(), sp.op);
  return {ShardTensor(idx.to(dev), pair_spec), ShardTensor(dist.to(points.dtype()).to(dev), pair_spec),
          ShardTensor(cnt.to(dev), count_spec)};
}

void check_args(const ShardTensor& points, const ShardTensor& queries, const SearchParams& sp) {
  SHARDRT_CHECK(points.dtype() == queries.dtype() && (points.dtype() == DType::f64 || points.dtype() == DType::f32),
                DTypeError, sp.op, ": points ", points.str(), " and queries ", queries.str(),
                " must share an f32/f64 dtype");
  SHARDRT_CHECK(points.global_shape()[1] == queries.global_shape()[1], ShapeError, sp.op, ": points ", points.str(),
                " and queries ", queries.str(), " differ in the coordinate dim");
  SHARDRT_CHECK(sp.k >= 1, ValueError, sp.op, ": the neighbour count must be >= 1, got ", sp.k);
  SHARDRT_CHECK(sp.radius2 >= 0, ValueError, sp.op, ": the radius must be >= 0");
  SHARDRT_CHECK(points.device() == queries.device(), DeviceError, sp.op, ": points ", points.str(), " and queries ",
                queries.str(), " must be on one device");
}

// Accepts when both are (N, D) on one mesh, no Partial, only dim 0 sharded, points sharded on <= 1 axis.
bool accepts(const ShardTensor& points, const ShardTensor& queries) {
  if (points.dim() != 2 || queries.dim() != 2 || !same_mesh(points.mesh(), queries.mesh())) return false;
  if (points.spec().any_partial() || queries.spec().any_partial()) return false;
  if (points.spec().axis_sharding(1) >= 0 || queries.spec().axis_sharding(1) >= 0) return false;
  return true;
}

// The running best lists of the local queries, and how a block of points (with its global offset) is merged
// into them: on the host (kernels/cpu) or on the points' CUDA device (kernels/cuda).
class BlockSearch {
 public:
  BlockSearch(const ShardTensor& queries, int64_t d, const SearchParams& sp)
      : sp_(sp), d_(d), nq_(queries.local().size(0)), device_(queries.device()) {
    if (device_.is_cpu()) {
      q_host_ = host_f64(queries.local());
      best_.resize(static_cast<size_t>(nq_));
      return;
    }
    q_dev_ = queries.local().detach().to(DType::f64).contiguous();
    d2_ = Tensor::empty({nq_, sp.k}, DType::f64, device_);
    index_ = Tensor::empty({nq_, sp.k}, DType::i64, device_);
    count_ = Tensor::empty({nq_}, DType::i64, device_);
    count_.zero_();
  }

  void merge(const Tensor& block, int64_t offset) {
    if (device_.is_cpu()) {
      search_block(best_, q_host_, host_f64(block), d_, offset, sp_);
      return;
    }
    const Tensor pts = block.detach().to(DType::f64).contiguous();
    kernels::cuda::merge_block_brute(nq_, q_dev_.data<double>(), pts.data<double>(), pts.size(0), d_, offset, sp_.k,
                                     sp_.radius2, d2_.data<double>(), index_.data<int64_t>(), count_.data<int64_t>(),
                                     current_stream(device_.index));
  }

  // The lists, read back from the device when they live there.
  Best lists() {
    if (device_.is_cpu()) return std::move(best_);
    const Tensor d2 = d2_.to(Device::cpu()), index = index_.to(Device::cpu()), count = count_.to(Device::cpu());
    Best best(static_cast<size_t>(nq_));
    for (int64_t i = 0; i < nq_; ++i) {
      for (int64_t j = 0; j < count.data<int64_t>()[i]; ++j)
        best[i].emplace_back(d2.data<double>()[i * sp_.k + j], index.data<int64_t>()[i * sp_.k + j]);
    }
    return best;
  }

 private:
  SearchParams sp_;
  int64_t d_, nq_;
  Device device_;
  std::vector<double> q_host_;
  Best best_;
  Tensor q_dev_, d2_, index_, count_;
};

Neighbors search(const ShardTensor& points, const ShardTensor& queries, const SearchParams& sp) {
  check_args(points, queries, sp);
  const int64_t d = points.global_shape()[1];
  BlockSearch searcher(queries, d, sp);
  const int axis = points.spec().axis_sharding(0);
  if (axis < 0) {
    searcher.merge(points.local(), 0);
    return results(searcher.lists(), points, queries, sp);
  }
  const Communicator& comm = patch::axis_comm(points.mesh(), axis);
  const int p = comm.size(), me = comm.rank();
  const Extents& ext = points.spec().extents(axis);
  std::vector<int64_t> off(p, 0);
  for (int j = 1; j < p; ++j) off[j] = off[j - 1] + ext[j - 1];
  const std::string label = std::string(sp.op) + ".forward";
  Tensor cur = points.local().detach().contiguous();
  for (int s = 0; s < p; ++s) {
    const int src = ((me - s) % p + p) % p;
    Tensor next;
    std::optional<CommHandle> inflight;
    if (s + 1 < p) {
      const int next_src = ((me - s - 1) % p + p) % p;
      next = Tensor::empty({ext[next_src], d}, cur.dtype(), cur.device());
      auto scope = comm.ledger().scope(label);
      inflight.emplace(comm.ring_shift_async(cur, next, 1));
    }
    searcher.merge(cur, off[src]);
    if (inflight) {
      inflight->wait();
      cur = next;
    }
  }
  return results(searcher.lists(), points, queries, sp);
}

}  // namespace

Neighbors knn(const ShardTensor& points, const ShardTensor& queries, int64_t k, NeighborSearch method) {
  using P = Patch<Neighbors(ShardTensor, ShardTensor, int64_t, NeighborSearch)>;
  static const std::vector<P> table = {
      {"knn/points-ring-or-local",
       [](const ShardTensor& p, const ShardTensor& q, int64_t, NeighborSearch) { return accepts(p, q); },
       [](const ShardTensor& p, const ShardTensor& q, int64_t kk, NeighborSearch m) {
         return search(p, q, {"knn", kk, std::numeric_limits<double>::infinity(), m});
       }}};
  return dispatch_patch("knn", table, {&points, &queries}, points, queries, k, method);
}

Neighbors radius_search(const ShardTensor& points, const ShardTensor& queries, double radius, int64_t max_points,
                        NeighborSearch method) {
  using P = Patch<Neighbors(ShardTensor, ShardTensor, double, int64_t, NeighborSearch)>;
  static const std::vector<P> table = {
      {"radius_search/points-ring-or-local",
       [](const ShardTensor& p, const ShardTensor& q, double, int64_t, NeighborSearch) { return accepts(p, q); },
       [](const ShardTensor& p, const ShardTensor& q, double r, int64_t m, NeighborSearch how) {
         return search(p, q, {"radius_search", m, r < 0 ? -1.0 : r * r, how});
       }}};
  return dispatch_patch("radius_search", table, {&points, &queries}, points, queries, radius, max_points, method);
}

ShardTensor gather_neighbor_features(const ShardTensor& features, const ShardTensor& neighbors) {
  return gather_global(features, 0, neighbors);
}

}  // namespace shardrt
