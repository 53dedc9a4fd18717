#include "mesh/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "mesh/mpi_backend.h"
#include "runtime/cuda/stream.h"
#include "runtime/errors.h"

namespace shardrt {

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f64:
      return ncclFloat64;
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i64:
      return ncclInt64;
    case DType::i32:
      return ncclInt32;
    case DType::u8:
    case DType::boolean:
      return ncclUint8;
  }
  throw DTypeError(detail::concat("nccl: unknown dtype ", static_cast<int>(t)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::mean:
      return ncclAvg;
  }
  return ncclSum;
}

// Address of element `index` of a contiguous tensor.
void* at(const Tensor& t, int64_t index) {
  return static_cast<char*>(t.raw_data()) + index * static_cast<int64_t>(dtype_size(t.dtype()));
}

std::vector<int64_t> offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> d(counts.size(), 0);
  for (std::size_t j = 1; j < counts.size(); ++j) d[j] = d[j - 1] + counts[j - 1];
  return d;
}

bool all_equal(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x != v.front()) return false;
  return true;
}

class Event {
 public:
  Event() { SHARDRT_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(e_); }  // safe while a stream still waits on it: release is deferred
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// The NCCL communicator and stream of one Communicator, shared with the operations still in flight.
struct NcclState {
  std::shared_ptr<CommCore> core;
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool aborted = false;

  ~NcclState() {
    if (comm != nullptr && !aborted) {
      // The communicator is non-blocking: finalisation completes asynchronously and is polled for a bounded
      // time; if it does not settle, abort rather than hang the process at exit.
      ncclResult_t r = ncclCommFinalize(comm);
      Deadline limit(10.0);
      while (r == ncclInProgress && !limit.expired()) ncclCommGetAsyncError(comm, &r);
      if (r == ncclSuccess) ncclCommDestroy(comm);
      else ncclCommAbort(comm);
    }
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  std::string error(ncclResult_t r) const {
    std::string s = ncclGetErrorString(r);
    const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
    if (last != nullptr && *last != '\0') s += std::string(": ") + last;
    return s;
  }

  // Aborting the NCCL communicator first releases the GPU work stuck in it.
  [[noreturn]] void fail(Call& call, const std::string& reason) {
    if (comm != nullptr && !aborted) {
      ncclCommAbort(comm);
      aborted = true;
    }
    core->fail(call, reason);
  }

  // A non-blocking communicator may answer ncclInProgress; nothing else may be issued until it settles.
  void settle(ncclResult_t r, Call& call) {
    PollBackoff backoff;
    while (r == ncclInProgress) {
      if (call.deadline.expired()) fail(call, core->timeout_reason(call, "NCCL to accept the operation"));
      backoff.pause();
      ncclCommGetAsyncError(comm, &r);
    }
    if (r != ncclSuccess) fail(call, "NCCL error: " + error(r));
  }

  // True once the NCCL stream has passed `done`; fails on a CUDA or asynchronous NCCL error.
  bool poll(const Event& done, Call& call) {
    cudaError_t e = cudaEventQuery(done.get());
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) fail(call, std::string("CUDA error: ") + cudaGetErrorString(e));
    ncclResult_t r = ncclSuccess;
    ncclCommGetAsyncError(comm, &r);
    if (r != ncclSuccess && r != ncclInProgress) fail(call, "NCCL error: " + error(r));
    return false;
  }

  void wait(const Event& done, Call& call, const std::string& waiting_for) {
    PollBackoff backoff;
    while (!poll(done, call)) {
      if (call.deadline.expired()) fail(call, core->timeout_reason(call, waiting_for));
      backoff.pause();
    }
    // Later compute-stream work that reads the outputs is ordered after the collective.
    SHARDRT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(device), done.get(), 0));
  }
};

// Collects the first error of the NCCL calls of one group (each call is checked; the group still ends).
struct GroupResult {
  ncclResult_t first = ncclSuccess;
  void operator()(ncclResult_t r) {
    if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
  }
};

class NcclPending final : public PendingOp {
 public:
  NcclPending(std::shared_ptr<NcclState> st, std::shared_ptr<Event> done, Call call, std::vector<Tensor> keep)
      : st_(std::move(st)), done_(std::move(done)), call_(std::move(call)), keep_(std::move(keep)) {}

  bool test() override {
    if (finished_) return true;
    if (!st_->poll(*done_, call_)) return false;
    SHARDRT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(st_->device), done_->get(), 0));
    finish();
    return true;
  }

  void wait() override {
    if (finished_) return;
    st_->wait(*done_, call_, "the neighbours' messages");
    finish();
  }

 private:
  void finish() {
    finished_ = true;
    keep_.clear();  // buffers packed for this transfer may be released now
  }

  std::shared_ptr<NcclState> st_;
  std::shared_ptr<Event> done_;
  Call call_;
  std::vector<Tensor> keep_;
  bool finished_ = false;
};

class NcclBackend final : public CommBackend {
 public:
  explicit NcclBackend(std::shared_ptr<NcclState> st) : st_(std::move(st)) {}
  const char* name() const override { return "nccl"; }

  void all_reduce(const Tensor& buf, ReduceOp op, Call& call) override {
    if (buf.numel() == 0) return;  // the size is the same on every rank, so every rank skips
    run(call, [&](GroupResult& add) {
      add(ncclAllReduce(buf.raw_data(), buf.raw_data(), static_cast<size_t>(buf.numel()), nccl_type(buf.dtype()),
                        nccl_op(op), st_->comm, st_->stream));
    });
  }

  void broadcast(const Tensor& buf, int root, Call& call) override {
    if (buf.numel() == 0) return;
    run(call, [&](GroupResult& add) {
      add(ncclBroadcast(buf.raw_data(), buf.raw_data(), static_cast<size_t>(buf.numel()), nccl_type(buf.dtype()), root,
                        st_->comm, st_->stream));
    });
  }

  void barrier(Call& call) override {
    Tensor token = Tensor::empty({1}, DType::f32, Device::cuda(st_->device));
    token.zero_();
    all_reduce(token, ReduceOp::sum, call);
  }

  void all_gather_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts, Call& call) override {
    if (out.numel() == 0) return;
    const auto d = offsets(counts);
    const ncclDataType_t type = nccl_type(in.dtype());
    run(call, [&](GroupResult& add) {
      if (all_equal(counts)) {
        add(ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(counts[0]), type, st_->comm, st_->stream));
        return;
      }
      // Uneven: one broadcast per rank, rooted at the owner of each segment, all in one group.
      for (std::size_t j = 0; j < counts.size(); ++j) {
        if (counts[j] == 0) continue;
        const int root = static_cast<int>(j);
        void* src = root == st_->core->rank ? in.raw_data() : at(out, d[j]);
        add(ncclBroadcast(src, at(out, d[j]), static_cast<size_t>(counts[j]), type, root, st_->comm, st_->stream));
      }
    });
  }

  void reduce_scatter_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts, ReduceOp op,
                        Call& call) override {
    if (in.numel() == 0) return;
    const auto d = offsets(counts);
    const ncclDataType_t type = nccl_type(in.dtype());
    run(call, [&](GroupResult& add) {
      if (all_equal(counts)) {
        add(ncclReduceScatter(in.raw_data(), out.raw_data(), static_cast<size_t>(counts[0]), type, nccl_op(op),
                              st_->comm, st_->stream));
        return;
      }
      // Uneven: one reduce per segment, rooted at the rank that keeps it.
      for (std::size_t j = 0; j < counts.size(); ++j) {
        if (counts[j] == 0) continue;
        const int root = static_cast<int>(j);
        void* dst = root == st_->core->rank ? out.raw_data() : at(in, d[j]);  // only the root's is written
        add(ncclReduce(at(in, d[j]), dst, static_cast<size_t>(counts[j]), type, nccl_op(op), root, st_->comm,
                       st_->stream));
      }
    });
  }

  void all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                    const std::vector<int64_t>& recv_counts, Call& call) override {
    const auto sd = offsets(send_counts), rd = offsets(recv_counts);
    const ncclDataType_t type = nccl_type(in.dtype());
    const int me = st_->core->rank;
    run(call, [&](GroupResult& add) {
      for (std::size_t j = 0; j < send_counts.size(); ++j) {
        const int peer = static_cast<int>(j);
        if (peer == me) {
          if (send_counts[j] > 0)
            SHARDRT_CUDA_CHECK(cudaMemcpyAsync(at(out, rd[j]), at(in, sd[j]),
                                               static_cast<size_t>(send_counts[j]) * dtype_size(in.dtype()),
                                               cudaMemcpyDeviceToDevice, st_->stream));
          continue;
        }
        if (send_counts[j] > 0)
          add(ncclSend(at(in, sd[j]), static_cast<size_t>(send_counts[j]), type, peer, st_->comm, st_->stream));
        if (recv_counts[j] > 0)
          add(ncclRecv(at(out, rd[j]), static_cast<size_t>(recv_counts[j]), type, peer, st_->comm, st_->stream));
      }
    });
  }

  // NCCL has no tags: transfers between two ranks match in issue order, which is the order the Communicator
  // issues them on both sides. Message sizes are not checked by NCCL; they must agree.
  std::unique_ptr<PendingOp> start_p2p(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs,
                                       Call call) override {
    std::vector<Tensor> keep;
    const int me = st_->core->rank;
    auto done = launch(call, [&](GroupResult& add) {
      std::vector<const Transfer*> self_recvs;
      for (const auto& r : recvs) {
        keep.push_back(r.buf);
        if (r.peer == me) self_recvs.push_back(&r);
        else if (r.buf.numel() > 0)
          add(ncclRecv(r.buf.raw_data(), static_cast<size_t>(r.buf.numel()), nccl_type(r.buf.dtype()), r.peer,
                       st_->comm, st_->stream));
      }
      std::size_t next_self = 0;
      for (const auto& s : sends) {
        keep.push_back(s.buf);
        if (s.peer == me) {
          SHARDRT_CHECK(next_self < self_recvs.size() && self_recvs[next_self]->buf.nbytes() == s.buf.nbytes(),
                        ValueError, "nccl: a send to this rank has no matching receive of the same size");
          SHARDRT_CUDA_CHECK(cudaMemcpyAsync(self_recvs[next_self++]->buf.raw_data(), s.buf.raw_data(), s.buf.nbytes(),
                                             cudaMemcpyDeviceToDevice, st_->stream));
        } else if (s.buf.numel() > 0) {
          add(ncclSend(s.buf.raw_data(), static_cast<size_t>(s.buf.numel()), nccl_type(s.buf.dtype()), s.peer,
                       st_->comm, st_->stream));
        }
      }
    });
    return std::make_unique<NcclPending>(st_, std::move(done), std::move(call), std::move(keep));
  }

 private:
  // Issues one operation's NCCL calls as a single group on the NCCL stream, after everything already queued
  // on the compute stream (which produced the inputs), and returns the event marking its completion.
  template <typename Issue>
  std::shared_ptr<Event> launch(Call& call, Issue&& issue) {
    cudaStream_t compute = current_stream(st_->device);  // also makes the device current
    Event ready;
    SHARDRT_CUDA_CHECK(cudaEventRecord(ready.get(), compute));
    SHARDRT_CUDA_CHECK(cudaStreamWaitEvent(st_->stream, ready.get(), 0));
    GroupResult add;
    add(ncclGroupStart());
    issue(add);
    ncclResult_t end = ncclGroupEnd();
    if (add.first != ncclSuccess) st_->fail(call, "NCCL error: " + st_->error(add.first));
    st_->settle(end, call);
    auto done = std::make_shared<Event>();
    SHARDRT_CUDA_CHECK(cudaEventRecord(done->get(), st_->stream));
    return done;
  }

  // Blocking: launch, then wait on the host with the deadline.
  template <typename Issue>
  void run(Call& call, Issue&& issue) {
    auto done = launch(call, std::forward<Issue>(issue));
    st_->wait(*done, call, "every rank to join");
  }

  std::shared_ptr<NcclState> st_;
};

}  // namespace

std::unique_ptr<CommBackend> make_nccl_backend(std::shared_ptr<CommCore> core, int device) {
  auto st = std::make_shared<NcclState>();
  st->core = core;
  st->device = device;
  Call call = core->call("nccl_init", [device] { return detail::concat("cuda:", device); });

  // Bootstrap as llm.c does: rank 0 creates the id, MPI carries it to the others.
  ncclUniqueId id{};
  if (core->rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) core->fail(call, std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
  }
  MPI_Request req;
  int rc = MPI_Ibcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, core->comm, &req);
  if (rc != MPI_SUCCESS) core->fail(call, "MPI_Ibcast of the NCCL id failed");
  mpi_wait(*core, call, req);

  SHARDRT_CUDA_CHECK(cudaSetDevice(device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every NCCL call returns at once, so a missing peer is bounded by our deadline
  ncclResult_t r = ncclCommInitRankConfig(&st->comm, core->size, id, core->rank, &config);
  st->settle(r, call);
  SHARDRT_CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
  return std::make_unique<NcclBackend>(std::move(st));
}

}  // namespace shardrt
