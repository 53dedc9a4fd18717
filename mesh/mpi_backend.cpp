#include "mesh/mpi_backend.h"

#include <climits>
#include <functional>

#include "mesh/mpi_call.h"
#include "mesh/mpi_types.h"
#include "runtime/errors.h"
#ifdef SHARDRT_WITH_CUDA
#include "mesh/host_stage.h"
#endif

namespace shardrt {

namespace {

// A buffer as MPI sees it: the tensor itself when it lives on the host, else a pinned host copy.
struct Staged {
  Tensor host;
  Tensor device;  // the CUDA tensor behind `host`; undefined for host buffers
  void* ptr() const { return host.raw_data(); }
};

// `load`: the operation reads the buffer, so a CUDA buffer's contents must be copied to the host first.
Staged stage(const Tensor& t, bool load) {
  if (!t.device().is_cuda()) return {t, Tensor()};
#ifdef SHARDRT_WITH_CUDA
  Staged s{pinned_host_like(t), t};
  if (load) s.host.copy_(t);  // waits for the compute stream, so the copy sees every queued write
  return s;
#else
  (void)load;
  throw DeviceError(detail::concat("mpi: ", t.str(), " needs CUDA, but ShardRT was built without it"));
#endif
}

void unstage(const Staged& s) {
  if (s.device.defined()) s.device.copy_(s.host);
}

int mpi_count(int64_t n, const Call& call) {
  // MPI-3 counts and displacements are C ints.
  SHARDRT_CHECK(n <= INT_MAX, ValueError, call.kind, ": ", n, " elements exceed MPI's int count limit");
  return static_cast<int>(n);
}

void counts_and_displs(const std::vector<int64_t>& c, const Call& call, std::vector<int>& counts,
                       std::vector<int>& displs) {
  int64_t off = 0;
  counts.resize(c.size());
  displs.resize(c.size());
  for (std::size_t j = 0; j < c.size(); ++j) {
    counts[j] = mpi_count(c[j], call);
    displs[j] = mpi_count(off, call);
    off += c[j];
  }
}

// Buffers an abandoned operation may still write into; kept for the life of the process under the
// throw_error policy so that a late write never lands in freed memory.
void keep_forever(std::vector<Tensor> ts) {
  static auto* graveyard = new std::vector<Tensor>;
  for (auto& t : ts) graveyard->push_back(std::move(t));
}

// Fails the call after giving up on `reqs`. Point-to-point requests are cancelled; collective requests cannot
// be, so everything they touch is kept alive.
[[noreturn]] void give_up(CommCore& core, Call& call, const std::string& reason, std::vector<MPI_Request>& reqs,
                          bool point_to_point, std::vector<Tensor> buffers) {
  if (core.policy == FailurePolicy::throw_error) {
    for (auto& r : reqs) {
      if (r == MPI_REQUEST_NULL || !point_to_point) continue;
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
    keep_forever(std::move(buffers));
  }
  core.fail(call, reason);
}

std::string status_errors(int rc, const std::vector<MPI_Status>& st) {
  if (rc != MPI_ERR_IN_STATUS) return mpi_error_string(rc);
  std::string s;
  for (const auto& x : st)
    if (x.MPI_ERROR != MPI_SUCCESS && x.MPI_ERROR != MPI_ERR_PENDING)
      s += (s.empty() ? "" : "; ") + detail::concat("from/to rank ", x.MPI_SOURCE, ": ", mpi_error_string(x.MPI_ERROR));
  return s.empty() ? mpi_error_string(rc) : s;
}

// One MPI_Testall over `reqs` (with one status each); returns MPI's code and sets `done` when all completed.
int test_all(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& st, bool& done) {
  int flag = 0;
  int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, st.data());
  done = flag != 0;
  return rc;
}

// Polls a collective's request until it completes or the deadline passes.
void wait_collective(CommCore& core, Call& call, MPI_Request req, std::vector<Tensor> buffers) {
  std::vector<MPI_Request> reqs{req};
  std::vector<MPI_Status> st(1);
  PollBackoff backoff;
  for (bool done = false;;) {
    int rc = test_all(reqs, st, done);
    if (rc != MPI_SUCCESS) give_up(core, call, "MPI error: " + status_errors(rc, st), reqs, false, std::move(buffers));
    if (done) return;
    if (call.deadline.expired())
      give_up(core, call, core.timeout_reason(call, "every rank to join"), reqs, false, std::move(buffers));
    backoff.pause();
  }
}

void check_start(CommCore& core, Call& call, int rc) {
  if (rc != MPI_SUCCESS) core.fail(call, "MPI error when starting: " + mpi_error_string(rc));
}

// A started batch of MPI_Irecv/MPI_Isend. Receives come first in `reqs_` so their statuses line up with
// `recvs_`.
class MpiPending final : public PendingOp {
 public:
  MpiPending(std::shared_ptr<CommCore> core, Call call) : core_(std::move(core)), call_(std::move(call)) {}

  void start(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs) {
    for (const auto& r : recvs) {
      Staged s = stage(r.buf, false);
      MPI_Request q;
      check_start(*core_, call_,
                  MPI_Irecv(s.ptr(), mpi_count(r.buf.numel(), call_), mpi_datatype(r.buf.dtype()), r.peer, r.tag,
                            core_->comm, &q));
      reqs_.push_back(q);
      recvs_.push_back({s, r.peer, r.buf.numel()});
    }
    for (const auto& t : sends) {
      Staged s = stage(t.buf, true);
      MPI_Request q;
      check_start(*core_, call_,
                  MPI_Isend(s.ptr(), mpi_count(t.buf.numel(), call_), mpi_datatype(t.buf.dtype()), t.peer, t.tag,
                            core_->comm, &q));
      reqs_.push_back(q);
      sends_.push_back(s.host);
      send_peers_.push_back(t.peer);
    }
    st_ = std::vector<MPI_Status>(reqs_.size());
  }

  bool test() override {
    if (finished_) return true;
    bool done = false;
    int rc = test_all(reqs_, st_, done);
    if (rc != MPI_SUCCESS) give_up(*core_, call_, "MPI error: " + status_errors(rc, st_), reqs_, true, buffers());
    if (!done) return false;
    finish();
    return true;
  }

  void wait() override {
    PollBackoff backoff;
    while (!test()) {
      if (call_.deadline.expired())
        give_up(*core_, call_, core_->timeout_reason(call_, pending_peers()), reqs_, true, buffers());
      backoff.pause();
    }
  }

 private:
  struct Recv {
    Staged staged;
    int peer;
    int64_t expected;
  };

  // A receive must get exactly the elements its buffer holds: a shorter message would leave stale data behind.
  void finish() {
    finished_ = true;
    for (std::size_t i = 0; i < recvs_.size(); ++i) {
      int got = 0;
      MPI_Get_count(&st_[i], mpi_datatype(recvs_[i].staged.host.dtype()), &got);
      if (got != recvs_[i].expected)
        core_->fail(call_, detail::concat("received ", got, " elements from rank ", recvs_[i].peer, ", expected ",
                                          recvs_[i].expected, " (the ranks disagree on the message sizes)"));
    }
    for (const auto& r : recvs_) unstage(r.staged);
  }

  std::string pending_peers() const {
    std::string s;
    for (std::size_t i = 0; i < reqs_.size(); ++i) {
      if (reqs_[i] == MPI_REQUEST_NULL) continue;
      bool is_recv = i < recvs_.size();
      s += (s.empty() ? "" : ", ") + std::string(is_recv ? "a message from rank " : "rank ") +
           std::to_string(is_recv ? recvs_[i].peer : send_peer(i)) + (is_recv ? "" : " to take a message");
    }
    return s.empty() ? std::string("completion") : s;
  }
  int send_peer(std::size_t i) const { return send_peers_[i - recvs_.size()]; }

  std::vector<Tensor> buffers() const {
    std::vector<Tensor> b = sends_;
    for (const auto& r : recvs_) b.push_back(r.staged.host);
    return b;
  }

  std::shared_ptr<CommCore> core_;
  Call call_;
  std::vector<MPI_Request> reqs_;
  std::vector<MPI_Status> st_;
  std::vector<Recv> recvs_;
  std::vector<Tensor> sends_;
  std::vector<int> send_peers_;
  bool finished_ = false;
};

// One started non-blocking collective (MPI_I*): polled by test()/wait() like the blocking calls, under the deadline
// counted from when it was issued. `finish` runs once it completed (a mean's division, a CUDA buffer's copy back).
// Collective requests cannot be cancelled, so on failure every buffer it touches is kept alive (give_up).
class MpiCollectivePending final : public PendingOp {
 public:
  MpiCollectivePending(std::shared_ptr<CommCore> core, Call call, MPI_Request req, std::vector<Tensor> buffers,
                       std::function<void()> finish)
      : core_(std::move(core)), call_(std::move(call)), reqs_{req}, st_(1), buffers_(std::move(buffers)),
        finish_(std::move(finish)) {}

  bool test() override {
    if (finished_) return true;
    bool done = false;
    const int rc = test_all(reqs_, st_, done);
    if (rc != MPI_SUCCESS) give_up(*core_, call_, "MPI error: " + status_errors(rc, st_), reqs_, false, buffers_);
    if (!done) return false;
    finished_ = true;
    if (finish_) finish_();
    buffers_.clear();
    return true;
  }

  void wait() override {
    PollBackoff backoff;
    while (!test()) {
      if (call_.deadline.expired())
        give_up(*core_, call_, core_->timeout_reason(call_, "every rank to join"), reqs_, false, buffers_);
      backoff.pause();
    }
  }

 private:
  std::shared_ptr<CommCore> core_;
  Call call_;
  std::vector<MPI_Request> reqs_;
  std::vector<MPI_Status> st_;
  std::vector<Tensor> buffers_;  // held until completion: MPI reads and writes them meanwhile
  std::function<void()> finish_;
  bool finished_ = false;
};

}  // namespace

void MpiBackend::all_reduce(const Tensor& buf, ReduceOp op, Call& call) {
  Staged s = stage(buf, true);
  MPI_Request req;
  check_start(*core_, call,
              MPI_Iallreduce(MPI_IN_PLACE, s.ptr(), mpi_count(buf.numel(), call), mpi_datatype(buf.dtype()),
                             mpi_reduce_op(buf.dtype(), op), core_->comm, &req));
  wait_collective(*core_, call, req, {s.host});
  if (op == ReduceOp::mean && core_->size > 1) divide_host(s.ptr(), buf.dtype(), buf.numel(), core_->size);
  unstage(s);
}

std::unique_ptr<PendingOp> MpiBackend::start_all_reduce(const Tensor& buf, ReduceOp op, Call call) {
  Staged s = stage(buf, true);
  MPI_Request req;
  check_start(*core_, call,
              MPI_Iallreduce(MPI_IN_PLACE, s.ptr(), mpi_count(buf.numel(), call), mpi_datatype(buf.dtype()),
                             mpi_reduce_op(buf.dtype(), op), core_->comm, &req));
  const int size = core_->size;
  return std::make_unique<MpiCollectivePending>(core_, std::move(call), req, std::vector<Tensor>{s.host},
                                                [s, op, size, buf] {
    if (op == ReduceOp::mean && size > 1) divide_host(s.ptr(), buf.dtype(), buf.numel(), size);
    unstage(s);
  });
}

void MpiBackend::broadcast(const Tensor& buf, int root, Call& call) {
  bool is_root = core_->rank == root;
  Staged s = stage(buf, is_root);
  MPI_Request req;
  check_start(*core_, call,
              MPI_Ibcast(s.ptr(), mpi_count(buf.numel(), call), mpi_datatype(buf.dtype()), root, core_->comm, &req));
  wait_collective(*core_, call, req, {s.host});
  if (!is_root) unstage(s);
}

void MpiBackend::barrier(Call& call) {
  MPI_Request req;
  check_start(*core_, call, MPI_Ibarrier(core_->comm, &req));
  wait_collective(*core_, call, req, {});
}

void MpiBackend::all_gather_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts, Call& call) {
  std::vector<int> c, d;
  counts_and_displs(counts, call, c, d);
  Staged si = stage(in, true), so = stage(out, false);
  MPI_Datatype t = mpi_datatype(in.dtype());
  MPI_Request req;
  check_start(*core_, call,
              MPI_Iallgatherv(si.ptr(), c[core_->rank], t, so.ptr(), c.data(), d.data(), t, core_->comm, &req));
  wait_collective(*core_, call, req, {si.host, so.host});
  unstage(so);
}

void MpiBackend::reduce_scatter_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts, ReduceOp op,
                                  Call& call) {
  std::vector<int> c, d;
  counts_and_displs(counts, call, c, d);
  Staged si = stage(in, true), so = stage(out, false);
  MPI_Request req;
  check_start(*core_, call,
              MPI_Ireduce_scatter(si.ptr(), so.ptr(), c.data(), mpi_datatype(in.dtype()), mpi_reduce_op(in.dtype(), op),
                                  core_->comm, &req));
  wait_collective(*core_, call, req, {si.host, so.host});
  if (op == ReduceOp::mean && core_->size > 1) divide_host(so.ptr(), out.dtype(), out.numel(), core_->size);
  unstage(so);
}

void MpiBackend::all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                              const std::vector<int64_t>& recv_counts, Call& call) {
  std::vector<int> sc, sd, rc, rd;
  counts_and_displs(send_counts, call, sc, sd);
  counts_and_displs(recv_counts, call, rc, rd);
  Staged si = stage(in, true), so = stage(out, false);
  MPI_Datatype t = mpi_datatype(in.dtype());
  MPI_Request req;
  check_start(*core_, call,
              MPI_Ialltoallv(si.ptr(), sc.data(), sd.data(), t, so.ptr(), rc.data(), rd.data(), t, core_->comm, &req));
  wait_collective(*core_, call, req, {si.host, so.host});
  unstage(so);
}

std::unique_ptr<PendingOp> MpiBackend::start_all_gather_v(const Tensor& in, const Tensor& out,
                                                          const std::vector<int64_t>& counts, Call call) {
  std::vector<int> c, d;
  counts_and_displs(counts, call, c, d);
  Staged si = stage(in, true), so = stage(out, false);
  MPI_Datatype t = mpi_datatype(in.dtype());
  MPI_Request req;
  check_start(*core_, call,
              MPI_Iallgatherv(si.ptr(), c[core_->rank], t, so.ptr(), c.data(), d.data(), t, core_->comm, &req));
  return std::make_unique<MpiCollectivePending>(core_, std::move(call), req, std::vector<Tensor>{si.host, so.host},
                                                [so] { unstage(so); });
}

std::unique_ptr<PendingOp> MpiBackend::start_reduce_scatter_v(const Tensor& in, const Tensor& out,
                                                              const std::vector<int64_t>& counts, ReduceOp op,
                                                              Call call) {
  std::vector<int> c, d;
  counts_and_displs(counts, call, c, d);
  Staged si = stage(in, true), so = stage(out, false);
  MPI_Request req;
  check_start(*core_, call,
              MPI_Ireduce_scatter(si.ptr(), so.ptr(), c.data(), mpi_datatype(in.dtype()), mpi_reduce_op(in.dtype(), op),
                                  core_->comm, &req));
  const int size = core_->size;
  return std::make_unique<MpiCollectivePending>(core_, std::move(call), req, std::vector<Tensor>{si.host, so.host},
                                                [so, op, out, size] {
                                                  if (op == ReduceOp::mean && size > 1)
                                                    divide_host(so.ptr(), out.dtype(), out.numel(), size);
                                                  unstage(so);
                                                });
}

void mpi_wait(CommCore& core, Call& call, MPI_Request req) { wait_collective(core, call, req, {}); }

std::unique_ptr<PendingOp> MpiBackend::start_p2p(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs,
                                                 Call call) {
  auto op = std::make_unique<MpiPending>(core_, std::move(call));
  op->start(sends, recvs);
  return op;
}

}  // namespace shardrt
