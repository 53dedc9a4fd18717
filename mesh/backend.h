// The transport interface behind a Communicator. The Communicator validates arguments, records the ledger
// and picks a backend by the buffers' device; a backend only moves bytes. Every buffer it receives is
// contiguous, and in/out pairs share dtype and device. Element counts are per rank, in communicator rank order.
#pragma once
#include <memory>
#include <vector>

#include "mesh/comm_core.h"
#include "runtime/tensor.h"

namespace shardrt {

// A started point-to-point batch. test() advances it without blocking; wait() blocks until it is complete,
// failing through the CommCore when its deadline passes.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

// One point-to-point message: `buf` is sent to, or received from, communicator rank `peer`.
struct Transfer {
  Tensor buf;
  int peer;
  int tag;
};

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  virtual const char* name() const = 0;  // "mpi" or "nccl"

  virtual void all_reduce(const Tensor& buf, ReduceOp op, Call& call) = 0;  // in place
  virtual void broadcast(const Tensor& buf, int root, Call& call) = 0;
  virtual void barrier(Call& call) = 0;
  // out = concatenation over ranks j of counts[j] elements; in holds counts[rank].
  virtual void all_gather_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts, Call& call) = 0;
  // in holds sum(counts) elements; out = the reduction of segment `rank` over all ranks.
  virtual void reduce_scatter_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts, ReduceOp op,
                                Call& call) = 0;
  // Segment j of in (send_counts[j] elements) goes to rank j; segment j of out comes from rank j.
  virtual void all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                            const std::vector<int64_t>& recv_counts, Call& call) = 0;
  // Starts every transfer of the batch together (deadlock-free in any order) and returns at once.
  virtual std::unique_ptr<PendingOp> start_p2p(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs,
                                               Call call) = 0;

  // ---- non-blocking all_reduce (Communicator::all_reduce_async) ----
  // Starts the in-place reduction and returns at once; the op completes it. A backend without a non-blocking
  // form runs the blocking call here and returns an op that is already done (correct, only not overlapped).
  virtual std::unique_ptr<PendingOp> start_all_reduce(const Tensor& buf, ReduceOp op, Call call);
  // ---- non-blocking all_gather_v / reduce_scatter_v (Communicator's *_async) ----
  // Start the collective and return at once; the op completes it. A backend without a non-blocking form runs the
  // blocking call here and returns an op that is already complete (correct, only not overlapped).
  virtual std::unique_ptr<PendingOp> start_all_gather_v(const Tensor& in, const Tensor& out,
                                                        const std::vector<int64_t>& counts, Call call);
  virtual std::unique_ptr<PendingOp> start_reduce_scatter_v(const Tensor& in, const Tensor& out,
                                                            const std::vector<int64_t>& counts, ReduceOp op, Call call);
};

// A PendingOp that has nothing left to do.
class CompletedOp final : public PendingOp {
 public:
  bool test() override { return true; }
  void wait() override {}
};

inline std::unique_ptr<PendingOp> CommBackend::start_all_gather_v(const Tensor& in, const Tensor& out,
                                                                  const std::vector<int64_t>& counts, Call call) {
  all_gather_v(in, out, counts, call);
  return std::make_unique<CompletedOp>();
}

inline std::unique_ptr<PendingOp> CommBackend::start_reduce_scatter_v(const Tensor& in, const Tensor& out,
                                                                      const std::vector<int64_t>& counts, ReduceOp op,
                                                                      Call call) {
  reduce_scatter_v(in, out, counts, op, call);
  return std::make_unique<CompletedOp>();
}

inline std::unique_ptr<PendingOp> CommBackend::start_all_reduce(const Tensor& buf, ReduceOp op, Call call) {
  all_reduce(buf, op, call);
  return std::make_unique<CompletedOp>();
}

}  // namespace shardrt
