// Deferred domain sums of parameter grads, in buckets, during backward.
//
// Normally every sharded patch sums its parameters' grads over the domain axis in its own backward: one all_reduce
// per use of a parameter (a ViT block: one per linear, per layer_norm, ...). Under a DeferredDomainSums scope the
// patches leave them partial (DeferDomainParamGradSums, patches/domain_batch.h) and this class sums them instead,
// once per parameter: the grad arena is cut into buckets of whole slots, and the moment every leaf of a bucket has
// its final grad (LeafGradReadyHook, autograd/engine.h) the bucket's reduction starts, while backward goes on with
// the earlier layers. Two ways, per group:
//   in place (a group without a shard: the optimizer's `replicated` mode, and any mode with one shard): one
//     all_reduce_async on the bucket's range of the arena — over the whole mesh in `replicated` mode, so the ddp
//     sum is the same collective, else over the domain axis;
//   into the shard (`ddp`, `mesh`, zero3's root unit with ddp > 1): a ShardReduce chain (optim/shard_reduce.h) —
//     reduce_scatter_v over ddp of the bucket's range into the owners' pieces, then the domain sum of the piece
//     this rank owns (~1/ddp of the bucket), written into the optimizer's grad shard; step() reduce-scatters
//     nothing more.
// The chain's second stage shares the domain communicator with the patches' backward collectives, so it must be
// issued at the same point of the program on every rank: bucket k's domain sum is issued when bucket k+1 becomes
// ready (after k+1's own ddp reduce-scatter went out, so one is always in flight), waiting for k's reduce-scatter
// there if it is not done yet. Every leaf-ready event tests the in-flight handles (MPI progresses a non-blocking
// collective only inside MPI calls). finish() (Optimizer::step calls it) starts what never became ready
// (parameters no node reached), issues the remaining domain sums in bucket order and waits for everything.
//
// Why it is exact: a parameter's grad is a sum over its uses and over the domain (and ddp) ranks; the patches'
// per-use sums and one sum of the accumulated partial grad are the same sum, regrouped (to rounding). Buckets start
// in the order they become ready, which is a function of the recorded program alone (the engine's node order), so
// every rank issues them in the same order, interleaved the same way with the patches' own collectives.
// bf16 / f16 grads are summed with f32 accumulation (into an f32 shard: widened first, summed in f32 throughout).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autograd/engine.h"
#include "mesh/communicator.h"
#include "optim/arena.h"
#include "optim/shard_reduce.h"
#include "patches/domain_batch.h"

namespace shardrt::optim {

// One bucket: the arena elements [begin, end) of one dtype group, covering `slots` (whole slots, with any
// alignment padding between them, whose grads are zero).
struct GradBucket {
  size_t group = 0;
  int64_t begin = 0, end = 0;
  std::vector<size_t> slots;
};

// Buckets of one group, walking its slots from the last to the first (backward finishes the last parameters
// first): a bucket is closed as soon as its slots hold at least `bucket_bytes` bytes of grads (elements times
// `element_bytes`); a slot is never split, so a slot larger than the size is a bucket of its own. ValueError for
// bucket_bytes < 1.
std::vector<GradBucket> plan_grad_buckets(const ArenaLayout& layout, size_t group, int64_t bucket_bytes,
                                          int64_t element_bytes);

class DeferredDomainSums {
 public:
  // One dtype group of the optimizer: its layout, its grad arena, and the autograd meta of each slot's parameter.
  struct Group {
    const ArenaLayout* layout = nullptr;
    Tensor grads;  // the whole grad arena
    std::vector<AutogradMeta*> leaves;
    bool low_precision = false;  // sum with f32 accumulation
    // Reduced into the shard: this rank's grad shard (layout->shard_numel elements; f32 for 16-bit grads), which
    // the buckets write; the padding no bucket covers stays as given (zero). Undefined: summed in place.
    Tensor shard;
  };
  // Who sums. `in_place`: the communicator the groups without a shard are summed over — the domain axis, or the
  // whole mesh when the batch-axis sum can be folded in too (`replicated` mode: one all_reduce per bucket does
  // both). `batch`, `domain` and `cut` (its shard_numel taken from each group's layout): the chain of the groups
  // with a shard. A null or one-rank communicator has nothing to sum over and issues nothing.
  struct Reduction {
    const Communicator* in_place = nullptr;
    const Communicator* batch = nullptr;
    const Communicator* domain = nullptr;
    ShardCut cut;
  };
  // `reduce`: false on the micro-batches of a gradient-accumulation window that do not update — their partial
  // grads just accumulate, and the last one's buckets sum the total.
  DeferredDomainSums(Reduction how, std::vector<Group> groups, int64_t bucket_bytes, bool reduce);
  // Finishes (unless an exception is unwinding: then only in-flight sums are waited for, nothing new is issued).
  ~DeferredDomainSums();
  DeferredDomainSums(const DeferredDomainSums&) = delete;
  DeferredDomainSums& operator=(const DeferredDomainSums&) = delete;

  // Starts every bucket not started yet (in bucket order), issues every domain sum not issued yet (in start order),
  // waits for all; afterwards the arena (in place) or the shards hold whole grads. Idempotent. Every bucket's
  // collectives count in the ledger under "optimizer.grad_buckets".
  void finish();
  bool reduces() const { return reduce_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // Bucket indices in the order their sums were started (after finish(): all of them, when reducing).
  const std::vector<size_t>& start_order() const { return started_; }

 private:
  void on_ready(AutogradMeta& leaf);
  void start(size_t bucket);
  void test_in_flight();

  Reduction how_;
  std::vector<Group> groups_;
  bool reduce_;
  std::vector<GradBucket> buckets_;
  std::unordered_map<AutogradMeta*, size_t> bucket_of_;  // leaf -> bucket
  std::vector<int> waiting_;                              // per bucket: leaves not final yet
  std::unordered_set<AutogradMeta*> announced_;
  std::vector<bool> launched_;
  std::vector<size_t> started_;
  std::vector<CommHandle> handles_;     // in-place sums
  std::vector<std::optional<ShardReduce>> chains_;  // per bucket: its chain into the shard (groups with one)
  bool finished_ = false;
  DeferDomainParamGradSums patches_defer_;  // the patches' switch, for the life of this scope
  std::optional<LeafGradReadyHook> hook_;
};

}  // namespace shardrt::optim
