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

DeferredDomainSums::DeferredDomainSums(const Communicator* over, std::vector<Group> groups, int64_t bucket_bytes,
                                       bool reduce)
    : over_(over && over->size() > 1 ? over : nullptr), groups_(std::move(groups)), reduce_(reduce) {
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

void DeferredDomainSums::on_ready(AutogradMeta& leaf) {
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
  if (!over_) return;
  const GradBucket& bucket = buckets_[b];
  const Group& grp = groups_[bucket.group];
  auto scope = over_->ledger().scope("optimizer.grad_buckets");
  handles_.push_back(over_->all_reduce_async(grp.grads.narrow(0, bucket.begin, bucket.end - bucket.begin),
                                               ReduceOp::sum,
                                               grp.low_precision ? Accumulate::f32 : Accumulate::native));
}

void DeferredDomainSums::finish() {
  if (finished_) return;
  hook_.reset();  // nothing after this point is announced
  if (reduce_)
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!launched_[b]) start(b);
  for (CommHandle& h : handles_) h.wait();
  handles_.clear();
  finished_ = true;
}

}  // namespace shardrt::optim
