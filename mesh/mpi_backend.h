// MPI transport: host buffers directly, CUDA buffers through pinned host copies (so a multi-rank job works with
// CUDA tensors where NCCL cannot run, e.g. several ranks sharing one GPU). Every operation is a non-blocking
// MPI call polled with MPI_Test until it completes or the call's deadline passes.
#pragma once
#include <memory>

#include "mesh/backend.h"

namespace shardrt {

class MpiBackend final : public CommBackend {
 public:
  explicit MpiBackend(std::shared_ptr<CommCore> core) : core_(std::move(core)) {}
  const char* name() const override { return "mpi"; }

  void all_reduce(const Tensor& buf, ReduceOp op, Call& call) override;
  void broadcast(const Tensor& buf, int root, Call& call) override;
  void barrier(Call& call) override;
  void all_gather_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts, Call& call) override;
  void reduce_scatter_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts, ReduceOp op,
                        Call& call) override;
  void all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                    const std::vector<int64_t>& recv_counts, Call& call) override;
  std::unique_ptr<PendingOp> start_p2p(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs,
                                       Call call) override;
  // MPI_Iallgatherv / MPI_Ireduce_scatter, completed by the returned op (polled under the call's deadline).
  std::unique_ptr<PendingOp> start_all_gather_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts,
                                                Call call) override;
  std::unique_ptr<PendingOp> start_reduce_scatter_v(const Tensor& in, const Tensor& out,
                                                    const std::vector<int64_t>& counts, ReduceOp op,
                                                    Call call) override;
  // MPI_Iallreduce, completed by the returned op (polled under the call's deadline).
  std::unique_ptr<PendingOp> start_all_reduce(const Tensor& buf, ReduceOp op, Call call) override;

 private:
  std::shared_ptr<CommCore> core_;
};

// Polls one MPI request (e.g. of MPI_Comm_idup) until it completes or the call's deadline passes.
void mpi_wait(CommCore& core, Call& call, MPI_Request req);

}  // namespace shardrt
