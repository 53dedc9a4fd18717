#include "optim/shard_reduce.h"

#include <algorithm>

#include "autograd/engine.h"
#include "runtime/errors.h"

namespace shardrt::optim {

namespace {

int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

bool low_precision(DType d) { return d == DType::bf16 || d == DType::f16; }

// One rank, or none: that stage has nobody to exchange with.
const Communicator* several(const Communicator* c) { return c && c->size() > 1 ? c : nullptr; }

}  // namespace

std::vector<int64_t> ShardCut::batch_counts(int64_t begin, int64_t end) const {
  const int64_t s = segment_numel();
  std::vector<int64_t> counts;
  for (int q = 0; q < batch_ranks; ++q) counts.push_back(overlap(begin, end, q * s, (q + 1) * s));
  return counts;
}

std::vector<int64_t> ShardCut::domain_counts(int64_t begin, int64_t end) const {
  const int64_t base = batch_index * segment_numel();
  std::vector<int64_t> counts;
  for (int d = 0; d < domain_ranks; ++d)
    counts.push_back(overlap(begin, end, base + d * shard_numel, base + (d + 1) * shard_numel));
  return counts;
}

namespace {
// [begin, end) clipped to [lo, hi); an empty result sits inside [lo, hi], so it narrows a view there.
std::pair<int64_t, int64_t> clip_to(int64_t begin, int64_t end, int64_t lo, int64_t hi) {
  const int64_t a = std::clamp(begin, lo, hi);
  return {a, std::clamp(end, a, hi)};
}
}  // namespace

std::pair<int64_t, int64_t> ShardCut::own_piece(int64_t begin, int64_t end) const {
  return clip_to(begin, end, own_begin(), own_begin() + shard_numel);
}

std::pair<int64_t, int64_t> ShardCut::segment_piece(int64_t begin, int64_t end) const {
  const int64_t s = segment_numel();
  return clip_to(begin, end, batch_index * s, (batch_index + 1) * s);
}

ShardReduce::ShardReduce(const ShardCut& cut, const Communicator* batch, const Communicator* domain, Tensor range,
                         int64_t begin, Tensor target, Into into, bool sum_domain, std::string scope)
    : cut_(cut),
      batch_(several(batch)),
      domain_(several(domain)),
      range_(std::move(range)),
      target_(std::move(target)),
      begin_(begin),
      into_(into),
      sum_domain_(sum_domain),
      scope_(std::move(scope)) {
  SHARDRT_CHECK(target_.numel() == cut_.shard_numel && target_.is_contiguous() && range_.is_contiguous(),
                ValueError, "optimizer: shard reduction of ", range_.str(), " into ", target_.str(),
                ": the target must be the contiguous shard of ", cut_.shard_numel, " elements");
  SHARDRT_CHECK(!(into_ == Into::add && cut_.over_domain), ValueError,
                "optimizer: shard reduction: adding into a shard is supported for shards over ddp only");
  SHARDRT_CHECK((batch_ ? batch_->size() : 1) == cut_.batch_ranks &&
                    (domain_ ? domain_->size() : 1) == cut_.domain_ranks,
                ValueError, "optimizer: shard reduction: the communicators' sizes differ from the cut's ",
                cut_.batch_ranks, " x ", cut_.domain_ranks, " ranks");
}

CommHandle ShardReduce::scatter(const Communicator& over, const Tensor& in, const Tensor& out,
                                const std::vector<int64_t>& counts) const {
  auto s = over.ledger().scope(scope_);
  const Accumulate acc = low_precision(target_.dtype()) ? Accumulate::f32 : Accumulate::native;
  // An even cut (a whole zero3 block arena: every rank one shard) is the plain collective, as the ledger expects.
  const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts.front(); });
  return even ? over.reduce_scatter_async(in, out, ReduceOp::sum, acc)
              : over.reduce_scatter_v_async(in, out, counts, ReduceOp::sum, acc);
}

void ShardReduce::start() {
  if (started_) return;
  started_ = true;
  const int64_t end = begin_ + range_.numel();
  const Tensor in = range_.dtype() == target_.dtype() ? range_ : range_.to(target_.dtype());
  const auto [lo, hi] = cut_.segment_piece(begin_, end);
  if (!batch_) {
    // One ddp rank: its segment is the whole arena, so the range is already its part.
    piece_ = in;
    return;
  }
  // Straight into the target where the ddp part is the final piece (shards over ddp, overwriting).
  piece_ = !cut_.over_domain && into_ == Into::write ? target_.narrow(0, lo - cut_.own_begin(), hi - lo)
                                                     : Tensor::empty({hi - lo}, target_.dtype());
  if (range_.numel() == 0) return;  // every rank's counts are zero alike
  stage1_ = scatter(*batch_, in, piece_, cut_.batch_counts(begin_, end));
}

void ShardReduce::advance() {
  if (advanced_) return;
  start();
  stage1_.wait();
  advanced_ = true;
  const int64_t end = begin_ + range_.numel();
  const auto [lo, hi] = cut_.segment_piece(begin_, end);
  const auto [own_lo, own_hi] = cut_.own_piece(lo, hi);
  const Tensor own = target_.narrow(0, own_lo - cut_.own_begin(), own_hi - own_lo);
  const Accumulate acc = low_precision(target_.dtype()) ? Accumulate::f32 : Accumulate::native;
  if (cut_.over_domain && sum_domain_ && domain_) {
    if (hi == lo) return;  // this ddp group owns none of the range (its whole domain group skips alike)
    stage2_ = scatter(*domain_, piece_, own, cut_.domain_counts(lo, hi));
    return;
  }
  // The own piece is piece_ itself (shards over ddp) or its slice (a mesh cut keeping its local part).
  const Tensor mine = piece_.narrow(0, own_lo - lo, own_hi - own_lo);
  const bool in_place = batch_ && !cut_.over_domain && into_ == Into::write;  // stage 1 wrote the target
  if (own.numel() > 0 && !in_place) {
    if (into_ == Into::add) accumulate_into(own, mine);
    else own.copy_(mine);
  }
  if (!cut_.over_domain) piece_ = Tensor();
  if (!cut_.over_domain && sum_domain_ && domain_ && own.numel() > 0) {
    auto s = domain_->ledger().scope(scope_);
    stage2_ = domain_->all_reduce_async(own, ReduceOp::sum, acc);
  }
}

void ShardReduce::wait() {
  if (done_) return;
  advance();
  stage2_.wait();
  piece_ = Tensor();
  range_ = Tensor();
  done_ = true;
}

void ShardReduce::test() {
  if (stage1_.pending()) stage1_.ready();
  if (stage2_.pending()) stage2_.ready();
}

}  // namespace shardrt::optim
