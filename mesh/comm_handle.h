// The handle of an asynchronous ring shift, halo exchange, all_gather or reduce_scatter: communication runs while the caller computes,
// and wait() completes it (bounded by the communicator's deadline, counted from when the call was issued).
// The buffers passed to the call must stay untouched until wait() returns.
#pragma once
#include <functional>
#include <memory>

#include "mesh/backend.h"

namespace shardrt {

class CommHandle {
 public:
  CommHandle() = default;  // nothing in flight
  CommHandle(std::unique_ptr<PendingOp> op, std::function<void()> on_complete)
      : op_(std::move(op)), on_complete_(std::move(on_complete)) {}
  CommHandle(CommHandle&& o) noexcept = default;
  CommHandle& operator=(CommHandle&& o) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  // Waits if still pending: buffers must not be released while a transfer may write them. A destructor
  // cannot throw, so a failure here aborts the job whatever the failure policy.
  ~CommHandle();

  void wait();
  // Advances the transfer without blocking; true once wait() would return at once.
  bool ready();
  bool pending() const { return op_ != nullptr; }

 private:
  void complete();
  void abandon();
  std::unique_ptr<PendingOp> op_;
  std::function<void()> on_complete_;  // e.g. scatter received halo slabs into a strided view
};

}  // namespace shardrt
