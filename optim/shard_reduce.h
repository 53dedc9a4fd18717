// One range of a grad arena, reduced into this rank's shard in two chained stages: first a reduce_scatter_v over
// the batch (ddp) axis that hands every ddp rank the part of the range inside its shard, then the domain sum of
// just that part. The one code path for "reduce-scatter over ddp, then the domain sum on the shard", shared by the
// deferred buckets (optim/grad_buckets.h: `ddp` and `mesh` modes, zero3's root unit) and zero3's per-block grads
// (optim/zero3.cpp).
//
// Why this order: the grads are partial over BOTH axes (the patches deferred the domain sum; every ddp rank holds
// its own samples' estimate). Summing over domain first moves the whole range through the domain all_reduce;
// scattering over ddp first leaves each rank only the ~1/ddp of the range it owns, and only that is summed over
// the domain axis. Both are the same sum, regrouped.
//
// Where the pieces go (ShardCut). The arena has `shards` shards of shard_numel elements each.
//   shards over ddp (`ddp`, `zero3`): ddp rank q owns shard q. Stage 1 counts: the range cut at q * shard_numel;
//     stage 2: all_reduce over domain of this rank's piece, in place (the domain ranks of a ddp group own the
//     same shard, so they all hold the same piece).
//   shards over the mesh (`mesh`): mesh rank q * domain + d owns shard q * domain + d, so ddp group q's ranks own
//     the contiguous segment [q * domain * shard_numel, (q + 1) * domain * shard_numel). Stage 1 counts: the range
//     cut at those segments; stage 2: reduce_scatter_v over domain of the segment's piece, cut at the shards,
//     straight into this rank's own shard. Bytes sent per rank: B (1 - 1/ddp) + B/ddp (1 - 1/domain) =
//     B (1 - 1/(ddp domain)) for a range of B bytes, the minimum for a reduce-scatter onto ddp x domain owners
//     (a single reduce_scatter_v over the whole mesh sends exactly as much); the two stages keep the ddp and
//     domain traffic on their own communicators, and the domain stage moves only 1/ddp of the range.
// Zero-size pieces are fine: a rank whose shard misses the range receives nothing in stage 1, and its stage 2 is
// skipped — by its whole domain group alike (they share the ddp coordinate, hence the piece), so nothing pairs
// wrongly.
//
// Ordering. Each stage is one collective on one communicator, issued when the caller says (start(), advance()):
// every rank must call them at the same points of its program, in the same order, because the domain stage shares
// the domain communicator with the patches' own backward collectives (MPI matches collectives by issue order). So
// stage 2 is never started "whenever stage 1 happens to be done" (a race that would differ between ranks): the
// caller advances a reduction at a point every rank reaches alike, and test() in between only drives progress.
//
// Precision. The target's dtype decides: a range of another dtype (bf16 grads into an f32 shard) is widened
// before stage 1, so both stages sum in f32; a 16-bit target sums with Accumulate::f32 (f32 on the wire, rounded
// once per stage).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mesh/communicator.h"

namespace shardrt::optim {

// How an arena's shards sit on the mesh (see the top of this file).
struct ShardCut {
  int64_t shard_numel = 0;
  int batch_ranks = 1, batch_index = 0;    // the ddp axis
  int domain_ranks = 1, domain_index = 0;  // the domain axis
  bool over_domain = false;                // shards over ddp x domain (`mesh`), else over ddp only
  int64_t segment_numel() const { return shard_numel * (over_domain ? domain_ranks : 1); }
  int own_shard() const { return over_domain ? batch_index * domain_ranks + domain_index : batch_index; }
  int64_t own_begin() const { return static_cast<int64_t>(own_shard()) * shard_numel; }
  // Stage 1: the elements of [begin, end) inside each ddp rank's segment, in ddp rank order.
  std::vector<int64_t> batch_counts(int64_t begin, int64_t end) const;
  // Stage 2 of a `mesh` cut: the elements of [begin, end) (inside ddp group batch_index's segment) in each of its
  // domain ranks' shards.
  std::vector<int64_t> domain_counts(int64_t begin, int64_t end) const;
  // The part of [begin, end) this rank's ddp group holds after stage 1, and the part this rank owns after both
  // stages: [first, second), empty ones placed inside the segment / shard.
  std::pair<int64_t, int64_t> segment_piece(int64_t begin, int64_t end) const;
  std::pair<int64_t, int64_t> own_piece(int64_t begin, int64_t end) const;
};

class ShardReduce {
 public:
  enum class Into { write, add };  // the own piece overwrites the target's elements, or is added to them
  // `range`: arena elements [begin, begin + range.numel()) (a 1-D contiguous view, untouched until stage 1 is
  // done). `target`: this rank's whole shard (cut.shard_numel elements, f32 / f64 or the range's dtype).
  // `batch` / `domain`: the axes' communicators (null or one rank: that stage is a local copy). `sum_domain`:
  // false leaves the own piece partial over domain (a `mesh` cut then keeps its local slice) — the
  // micro-batches of an accumulation window that do not reduce yet. `scope`: the ledger label of both stages.
  // Into::add is for shards over ddp only.
  ShardReduce(const ShardCut& cut, const Communicator* batch, const Communicator* domain, Tensor range, int64_t begin,
              Tensor target, Into into, bool sum_domain, std::string scope);
  ShardReduce(ShardReduce&&) noexcept = default;
  ShardReduce& operator=(ShardReduce&&) noexcept = default;

  // An even cut goes as reduce_scatter, any other as reduce_scatter_v (ledger kinds); both count the same bytes.
  void start();    // issues stage 1 (the ddp reduce_scatter_v)
  void advance();  // completes stage 1 and issues stage 2 (the domain sum); starts stage 1 first if needed
  void wait();     // completes everything; afterwards the target holds the own piece
  void test();     // drives in-flight transfers without blocking
  bool started() const { return started_; }
  bool advanced() const { return advanced_; }
  bool done() const { return done_; }

 private:
  CommHandle scatter(const Communicator& over, const Tensor& in, const Tensor& out,
                     const std::vector<int64_t>& counts) const;

  ShardCut cut_;
  const Communicator* batch_;
  const Communicator* domain_;
  Tensor range_, target_;
  int64_t begin_;
  Into into_;
  bool sum_domain_;
  std::string scope_;
  Tensor piece_;  // stage 1's output: this ddp rank's part of the range
  CommHandle stage1_, stage2_;
  bool started_ = false, advanced_ = false, done_ = false;
};

}  // namespace shardrt::optim
