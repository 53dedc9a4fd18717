#include "optim/grad_buckets.h"

#include <exception>

#include "mesh/comm_core.h"
#include "runtime/errors.h"

namespace shardrt::optim {

std::vector<GradBucket> plan_grad_buckets(const ArenaLayout& layout, size_t group, int64_t bucket_bytes,
                                          int64_t element_bytes) {
  SHARDRT_CHECK(bucket_bytes >= 1, ValueError, "optimizer: bucket_bytes ", bucket_bytes,
                " must be >= 1 (the size of one deferred domain-sum bucket, in bytes of grads)");
  std::vector<GradBucket> out;
  GradBucket open{group, 0, 0, {}};
  int64_t bytes = 0;
  for (size_t k = layout.slots.size(); k-- > 0;) {
    const ArenaSlot& s = layout.slots[k];
    if (open.slots.empty()) open.end = s.offset + s.numel;
    open.begin = s.offset;
    open.slots.push_back(k);
    bytes += s.numel * element_bytes;
    if (bytes >= bucket_bytes) {
      out.push_back(open);
      open = GradBucket{group, 0, 0, {}};
      bytes = 0;
    }
  }
  if (!open.slots.empty()) out.push_back(open);
  return out;
}

DeferredDomainSums::DeferredDomainSums(Reduction how, std::vector<Group> groups, int64_t bucket_bytes, bool reduce)
    : how_(how), groups_(std::move(groups)), reduce_(reduce) {
  if (how_.in_place && how_.in_place->size() == 1) how_.in_place = nullptr;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Group& grp = groups_[g];
    for (GradBucket& b : plan_grad_buckets(*grp.layout, g, bucket_bytes, dtype_size(grp.grads.dtype()))) {
      const size_t index = buckets_.size();
      for (size_t slot : b.slots) bucket_of_[grp.leaves.at(slot)] = index;
      waiting_.push_back(static_cast<int>(b.slots.size()));
      buckets_.push_back(std::move(b));
    }
  }
  launched_.assign(buckets_.size(), false);
  chains_.resize(buckets_.size());
  if (reduce_) hook_.emplace([this](AutogradMeta& leaf) { on_ready(leaf); });
}

DeferredDomainSums::~DeferredDomainSums() {
  hook_.reset();
  if (std::uncaught_exceptions() > 0) {
    // Unwinding: the ranks may no longer agree on what comes next, so issue nothing; in-flight sums are waited
    // for by their handles' destructors (the buffers must outlive the transfers).
    return;
  }
  try {
    finish();
  } catch (const std::exception& e) {
    abort_job(e.what());
  }
}

void DeferredDomainSums::test_in_flight() {
  for (CommHandle& h : handles_) h.ready();
  for (size_t b : started_)
    if (chains_[b]) chains_[b]->test();
}

void DeferredDomainSums::on_ready(AutogradMeta& leaf) {
  test_in_flight();
  auto it = bucket_of_.find(&leaf);
  if (it == bucket_of_.end()) return;  // not one of the optimizer's parameters (an input that requires grad)
  const size_t b = it->second;
  if (launched_[b]) {
    const GradBucket& bucket = buckets_[b];
    std::string names;
    for (size_t s : bucket.slots) names += (names.empty() ? "" : ", ") + groups_[bucket.group].layout->slots[s].name;
    throw ValueError("optimizer: deferred domain grad sums: a parameter of the bucket [" + names +
                     "] received a grad after the bucket's sum was started (a second backward in one deferred step); "
                     "run one backward per defer_domain_grad_sums() scope, or use gradient accumulation steps");
  }
  // A leaf reached by two backwards in one scope counts once (its second grad adds to a bucket not started yet).
  if (announced_.insert(&leaf).second && --waiting_[b] == 0) start(b);
}

void DeferredDomainSums::start(size_t b) {
  launched_[b] = true;
  started_.push_back(b);
  const GradBucket& bucket = buckets_[b];
  const Group& grp = groups_[bucket.group];
  const Tensor range = grp.grads.narrow(0, bucket.begin, bucket.end - bucket.begin);
  if (!grp.shard.defined()) {
    if (!how_.in_place) return;
    auto scope = how_.in_place->ledger().scope("optimizer.grad_buckets");
    handles_.push_back(how_.in_place->all_reduce_async(range, ReduceOp::sum,
                                                       grp.low_precision ? Accumulate::f32 : Accumulate::native));
    return;
  }
  ShardCut cut = how_.cut;
  cut.shard_numel = grp.layout->shard_numel;
  chains_[b].emplace(cut, how_.batch, how_.domain, range, bucket.begin, grp.shard, ShardReduce::Into::write,
                     /*sum_domain=*/true, "optimizer.grad_buckets");
  chains_[b]->start();
  // The domain sums of the buckets before this one go out now, at a point every rank reaches alike (see the top
  // of grad_buckets.h), while this bucket's ddp reduce-scatter is in flight.
  for (size_t k : started_)
    if (k != b && chains_[k] && !chains_[k]->advanced()) chains_[k]->advance();
}

void DeferredDomainSums::finish() {
  if (finished_) return;
  hook_.reset();  // nothing after this point is announced
  if (reduce_)
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!launched_[b]) start(b);
  for (size_t b : started_)
    if (chains_[b]) chains_[b]->advance();
  for (CommHandle& h : handles_) h.wait();
  handles_.clear();
  for (size_t b : started_)
    if (chains_[b]) chains_[b]->wait();
  finished_ = true;
}

}  // namespace shardrt::optim
