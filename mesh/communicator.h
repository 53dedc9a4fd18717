// Communicator: every collective ShardRT issues, over one MPI communicator (a mesh axis, the flattened mesh,
// or any communicator a caller hands over).
//
// Buffers. Collectives move flat element ranges of contiguous tensors (a non-contiguous one is a ShapeError;
// the ShardTensor layer arranges the concatenated dim outermost). In/out pairs share dtype and device. The
// v-variants take element counts per rank, in communicator rank order, identical on every rank; segments are
// laid out back to back in that order. dtypes: f64, f32, bf16, f16, i64, i32, u8 (and bool, moved as bytes,
// reduced only with max/min).
//
// Transport. Chosen per call by the buffers' device: host buffers go over MPI; CUDA buffers over NCCL when it is
// usable (see CudaTransport), else over MPI through pinned host memory. NCCL is initialised lazily by the
// first CUDA collective, so that first call must be one every rank issues (any collective, ring shift or halo
// exchange) — call init_cuda() first if a job starts with a plain send/recv of CUDA buffers.
//
// Failure. Every blocking call polls until done or until the communicator's deadline (timeout(), default
// SHARDRT_COMM_TIMEOUT or 300 s) passes; a timeout or transport error becomes a CommError naming the
// collective, the axis and the ranks, handled by the FailurePolicy (by default: printed, then MPI_Abort).
// Bad arguments are typed errors (ShapeError, DTypeError, DeviceError, ValueError) thrown before anything is
// sent; a rank that throws one leaves its peers to time out, unless the caller checked with agree_or_throw.
//
// Ledger. Every call is counted in ledger() before it starts (see mesh/ledger.h for the bytes of each kind).
//
// Checked mode (CommOptions::check_collectives, overridden by SHARDRT_COMM_CHECK=0|1; see mesh/check_mode.h).
// Before each collective, ring shift and halo exchange — and each agree — the ranks all-gather the call's
// signature (mesh/signature.h): the collective, its sequence number on this communicator, the transport,
// dtype, element count, root / offset / dim, reduction, and every rank's counts vector (v-variants), send and
// receive counts (all_to_all_v: what i sends j must be what j expects from i), message sizes (ring_shift: what
// r receives is what its source sends) or halo widths and slice size. A mismatch throws CommError on every
// rank, whatever the failure policy, naming the collective, the axis and what differs ("ranks disagree on
// dtype (f32 on ranks 0, 1; f64 on rank 2)"); nothing was sent, so the communicator stays usable. The check
// runs over MPI on the host under the call's deadline (a missing peer times out as usual), is not counted in
// the ledger, costs one all-gather of (8 + 2P) int64 per rank, and makes an async ring shift or halo exchange
// wait, when issued, until every rank has issued it. Not checked: send / recv (user-tagged point to point;
// the receiver already rejects a message of the wrong element count), and a rank that skips a collective whose
// signature equals the next one's (indistinguishable by signature). A rank that fails a collective locally
// (a typed argument error) and goes on is caught by the sequence number. 1-rank communicators skip the check.
//
// Not thread-safe: one thread issues a communicator's calls, in the same order on every rank.
#pragma once
#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mesh/comm_handle.h"
#include "mesh/comm_types.h"
#include "mesh/ledger.h"
#include "mesh/signature.h"
#include "runtime/tensor.h"

namespace shardrt {

struct CommCore;
class CommBackend;

struct CommOptions {
  double timeout_s = 0;  // 0: default_comm_timeout()
  FailurePolicy failure = FailurePolicy::abort_job;
  std::shared_ptr<CommLedger> ledger;  // null: default_ledger()
  CudaTransport cuda_transport = CudaTransport::automatic;
  // The GPU this rank drives: an ordinal, bind_by_local_rank (cuda:(node-local rank mod device count), see
  // mesh/device_binding.h), or no_gpu.
  int cuda_device = bind_by_local_rank;
  // Checked mode (see above); SHARDRT_COMM_CHECK, when set, overrides it. Must be the same on every rank.
  bool check_collectives = false;
  static constexpr int bind_by_local_rank = -1;
  static constexpr int no_gpu = -2;
};

class Communicator {
 public:
  // Tags of send/recv must lie in [0, max_user_tag]; larger ones are ShardRT's own.
  static constexpr int max_user_tag = 29999;

  // Collective over the ranks of `comm`, which it duplicates (the caller keeps and frees its own).
  // `axis` names the communicator in the ledger and in error messages.
  Communicator(MPI_Comm comm, std::string axis, CommOptions opts = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const std::string& axis() const;
  // MPI_COMM_WORLD rank of each member, by communicator rank.
  const std::vector<int>& world_ranks() const;
  MPI_Comm mpi_comm() const;                        // ShardRT's private duplicate
  int cuda_device() const { return cuda_device_; }  // -1 when no GPU is bound

  double timeout() const;
  void set_timeout(double seconds);
  FailurePolicy failure_policy() const;
  void set_failure_policy(FailurePolicy p);
  CommLedger& ledger() const { return *ledger_; }
  const std::shared_ptr<CommLedger>& ledger_ptr() const { return ledger_; }
  void set_ledger(std::shared_ptr<CommLedger> l);
  CudaTransport cuda_transport() const { return transport_; }
  void set_cuda_transport(CudaTransport t);  // same on every rank
  // Built with NCCL and every rank of this communicator bound to its own GPU.
  bool nccl_usable() const { return nccl_usable_; }
  bool checks_collectives() const;
  // Signature checks this communicator has issued (0 unless checked mode is on and size() > 1).
  int64_t signature_checks() const;
  // Collective: initialises NCCL now when CUDA buffers will travel over it.
  void init_cuda() const;

  // ---- collectives (every rank calls them, in the same order) ----
  // In place. Accumulate::f32 sums bf16/f16 in f32 and rounds once.
  void all_reduce(const Tensor& buf, ReduceOp op = ReduceOp::sum, Accumulate acc = Accumulate::native) const;
  // all_reduce, started now and completed by the handle's wait() (ledger and checked mode as for all_reduce, at
  // issue). `buf` must stay untouched, and alive, until then. Every rank must issue its async calls in the same
  // order relative to the communicator's other collectives.
  CommHandle all_reduce_async(const Tensor& buf, ReduceOp op = ReduceOp::sum,
                              Accumulate acc = Accumulate::native) const;
  void broadcast(const Tensor& buf, int root) const;  // in place; root is a communicator rank
  void barrier() const;
  // out.numel() == P * in.numel(); rank j's input lands at out[j*n, (j+1)*n).
  void all_gather(const Tensor& in, const Tensor& out) const;
  // counts[j] elements from rank j; in.numel() == counts[rank], out.numel() == sum(counts).
  void all_gather_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts) const;
  // in.numel() == P * out.numel(); out = the reduction over ranks of segment `rank` of in.
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum,
                      Accumulate acc = Accumulate::native) const;
  // in.numel() == sum(counts), out.numel() == counts[rank].
  void reduce_scatter_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts,
                        ReduceOp op = ReduceOp::sum, Accumulate acc = Accumulate::native) const;
  // Non-blocking forms of the four above (MPI_Iallgatherv / MPI_Ireduce_scatter): the same arguments, checks,
  // signature (checked mode) and ledger line as the blocking call, counted when issued; the handle completes it,
  // polled under the deadline counted from the issue. `in` and `out` must stay untouched (and alive: the handle
  // holds them) until wait() returns. With Accumulate::f32 the widened copy is made when issued and `out` is
  // written when the handle completes. Transports without a non-blocking form (NCCL so far) complete the call
  // before returning the handle.
  CommHandle all_gather_async(const Tensor& in, const Tensor& out) const;
  CommHandle all_gather_v_async(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts) const;
  CommHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::sum,
                                  Accumulate acc = Accumulate::native) const;
  CommHandle reduce_scatter_v_async(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts,
                                    ReduceOp op = ReduceOp::sum, Accumulate acc = Accumulate::native) const;
  // in.numel() == out.numel() == P * n; segment j of in goes to rank j, segment j of out comes from rank j.
  void all_to_all(const Tensor& in, const Tensor& out) const;
  // send_counts[j] elements to rank j, recv_counts[j] elements from rank j (recv_counts[j] on this rank equals
  // send_counts[rank] on rank j).
  void all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                    const std::vector<int64_t>& recv_counts) const;

  // ---- point to point ----
  // Blocking; `dst`/`src` are other communicator ranks. recv's buffer must match the message exactly.
  void send(const Tensor& buf, int dst, int tag = 0) const;
  void recv(const Tensor& buf, int src, int tag = 0) const;
  // Every rank sends `in` to rank (rank + offset) mod P and receives `out` from rank (rank - offset) mod P,
  // all at once (deadlock-free). out may differ from in in size: it must hold exactly what the source sends
  // (uneven shards travelling around a ring). in and out must not overlap.
  void ring_shift(const Tensor& in, const Tensor& out, int offset = 1) const;
  CommHandle ring_shift_async(const Tensor& in, const Tensor& out, int offset = 1) const;
  // Neighbour halo exchange along `dim` of `padded`, a contiguous tensor whose extent along `dim` on rank r is
  // widths.left[r] + interior + widths.right[r]. Fills the first left[r] slices with the last left[r] interior
  // slices of rank r-1, and the last right[r] slices with the first right[r] interior slices of rank r+1. The
  // global edges (rank 0's left slices, rank P-1's right slices) are left untouched. widths has P entries per
  // side, the same on every rank, so each rank knows what its neighbours expect.
  void halo_exchange(const Tensor& padded, int dim, const HaloWidths& widths) const;
  CommHandle halo_exchange_async(const Tensor& padded, int dim, const HaloWidths& widths) const;

  // ---- consistent validation ----
  // Every rank passes its local verdict. Returns nothing when every rank is ok; otherwise, on every rank, the
  // message of the lowest failing rank followed by the list of failing ranks. See agree_or_throw (mesh/agree.h).
  std::optional<std::string> agree(bool ok_here, const std::string& msg) const;

 private:
  CommBackend& backend_for(const Tensor& t, const char* kind) const;
  CommBackend& host_backend(const char* kind) const;
  bool routes_to_nccl(const Tensor& t) const;
  void record(const char* kind, int64_t bytes) const;
  std::string where(const char* kind) const;
  // `async`: start the call and return its handle; else complete it and return an empty handle.
  CommHandle gather_impl(const char* kind, const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts,
                         bool async) const;
  CommHandle reduce_scatter_impl(const char* kind, const Tensor& in, const Tensor& out,
                                 const std::vector<int64_t>& counts, ReduceOp op, Accumulate acc, bool async) const;
  void all_to_all_impl(const char* kind, const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                       const std::vector<int64_t>& recv_counts) const;
  // Point-to-point routing: CUDA buffers bound for NCCL need it initialised already (see init_cuda).
  CommBackend& p2p_backend_for(const Tensor& t, const char* kind) const;
  // Checked mode (signature_check.cpp): every public collective enters first, then checks its signature once
  // its arguments are valid and before anything is sent.
  void enter_collective() const;
  void check_signature(const CallSignature& sig) const;
  // The signature of a call moving `t`: its kind, t's dtype and transport; the caller adds the rest.
  CallSignature signature_of(const char* kind, const Tensor& t) const;

  std::shared_ptr<CommCore> core_;
  std::shared_ptr<CommLedger> ledger_;
  std::unique_ptr<CommBackend> mpi_;
  mutable std::unique_ptr<CommBackend> nccl_;  // created by the first CUDA collective
  CudaTransport transport_ = CudaTransport::automatic;
  int cuda_device_ = -1;
  bool nccl_usable_ = false;
};

}  // namespace shardrt
