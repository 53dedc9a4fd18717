#include "mesh/communicator.h"

#include <functional>
#include <numeric>
#include <string_view>

#include "mesh/check_mode.h"
#include "mesh/comm_core.h"
#include "mesh/device_binding.h"
#include "mesh/mpi_backend.h"
#include "mesh/mpi_call.h"
#include "runtime/errors.h"
#ifdef SHARDRT_WITH_NCCL
#include "mesh/nccl_backend.h"
#endif

namespace shardrt {

namespace {

int64_t total(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The checks below format their message (naming the collective, axis and rank) only when they fail.
void require_buffer(const CommCore& core, const char* kind, const Tensor& t, const char* what) {
  SHARDRT_CHECK(t.defined(), ValueError, core.where(kind), ": ", what, " is undefined");
  SHARDRT_CHECK(t.is_contiguous(), ShapeError, core.where(kind), ": ", what, " ", t.str(),
                " is not contiguous (collectives move flat element ranges; pass .contiguous())");
}

void require_pair(const CommCore& core, const char* kind, const Tensor& in, const Tensor& out) {
  SHARDRT_CHECK(in.dtype() == out.dtype(), DTypeError, core.where(kind), ": input ", in.str(), " and output ",
                out.str(), " differ in dtype");
  SHARDRT_CHECK(in.device() == out.device(), DeviceError, core.where(kind), ": input ", in.str(), " and output ",
                out.str(), " are on different devices");
}

void require_counts(const CommCore& core, const char* kind, const std::vector<int64_t>& c, const char* what) {
  SHARDRT_CHECK(static_cast<int>(c.size()) == core.size, ValueError, core.where(kind), ": ", what, " ", list_str(c),
                " has ", c.size(), " entries, expected one per rank (", core.size, ")");
  for (std::size_t j = 0; j < c.size(); ++j)
    SHARDRT_CHECK(c[j] >= 0, ValueError, core.where(kind), ": ", what, " ", list_str(c),
                  " has a negative entry at rank ", j);
}

void require_reducible(const CommCore& core, const char* kind, DType t, ReduceOp op) {
  SHARDRT_CHECK(op != ReduceOp::mean || is_floating(t), DTypeError, core.where(kind), ": mean of ", dtype_name(t),
                " would truncate; reduce with sum and divide in a floating dtype");
  SHARDRT_CHECK(t != DType::boolean || op == ReduceOp::max || op == ReduceOp::min, DTypeError, core.where(kind), ": ",
                reduce_op_name(op), " of bool is undefined; use max (any) or min (all)");
}

bool widens(DType t, Accumulate acc) { return acc == Accumulate::f32 && (t == DType::bf16 || t == DType::f16); }

int64_t op_code(ReduceOp op, bool wide) { return static_cast<int64_t>(op) * 2 + (wide ? 1 : 0); }

#ifdef SHARDRT_WITH_NCCL
int64_t host_hash() {
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  return static_cast<int64_t>(std::hash<std::string>{}(std::string(name, static_cast<std::size_t>(len))));
}
#endif

}  // namespace

Communicator::Communicator(MPI_Comm comm, std::string axis, CommOptions opts) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  SHARDRT_CHECK(initialized, ValueError, "Communicator '", axis, "': MPI is not initialised");
  SHARDRT_CHECK(comm != MPI_COMM_NULL, ValueError, "Communicator '", axis, "': MPI_COMM_NULL given");
  SHARDRT_CHECK(opts.timeout_s >= 0, ValueError, "Communicator '", axis, "': timeout ", opts.timeout_s,
                " s is negative");
  core_ = std::make_shared<CommCore>();
  core_->axis = std::move(axis);
  core_->timeout_s = opts.timeout_s > 0 ? opts.timeout_s : default_comm_timeout();
  core_->policy = opts.failure;
  core_->check = comm_check_enabled(opts.check_collectives);
  {
    // Until the duplicate exists, ShardRT's calls go to the caller's communicator, whose handler may be fatal.
    ErrorsReturnScope errors_return(comm);
    const std::string at = detail::concat("Communicator '", core_->axis, "' setup");
    check_mpi(MPI_Comm_rank(comm, &core_->rank), "MPI_Comm_rank", at);
    check_mpi(MPI_Comm_size(comm, &core_->size), "MPI_Comm_size", at);

    MPI_Group group, world;
    check_mpi(MPI_Comm_group(comm, &group), "MPI_Comm_group", at);
    check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group", at);
    std::vector<int> local(core_->size);
    std::iota(local.begin(), local.end(), 0);
    core_->world_ranks.resize(core_->size);
    check_mpi(MPI_Group_translate_ranks(group, core_->size, local.data(), world, core_->world_ranks.data()),
              "MPI_Group_translate_ranks", at);
    MPI_Group_free(&group);
    MPI_Group_free(&world);

    Call setup = core_->call("communicator setup");
    MPI_Request req;
    check_mpi(MPI_Comm_idup(comm, &core_->comm, &req), "MPI_Comm_idup", at);
    mpi_wait(*core_, setup, req);
    // Errors on the duplicate come back as codes, so they become CommErrors naming the collective, not MPI's
    // own abort.
    check_mpi(MPI_Comm_set_errhandler(core_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", at);
  }
  ledger_ = opts.ledger ? std::move(opts.ledger) : default_ledger();
  mpi_ = std::make_unique<MpiBackend>(core_);
  transport_ = opts.cuda_transport;
  if (opts.cuda_device >= 0) cuda_device_ = opts.cuda_device;
  else if (opts.cuda_device == CommOptions::bind_by_local_rank) {
    Device bound = bound_device(
        node_local(core_->comm, {detail::concat("Communicator '", core_->axis, "'"), core_->timeout_s, core_->policy})
            .rank);
    cuda_device_ = bound.is_cuda() ? bound.index : -1;
  }

#ifdef SHARDRT_WITH_NCCL
  // NCCL needs one GPU per rank: gather (host, device) of every member and look for a repeat.
  Tensor mine = Tensor::empty({2}, DType::i64),
         all = Tensor::empty({2 * static_cast<int64_t>(core_->size)}, DType::i64);
  mine.data<int64_t>()[0] = host_hash();
  mine.data<int64_t>()[1] = cuda_device_;
  Call setup = core_->call("communicator setup");
  mpi_->all_gather_v(mine, all, std::vector<int64_t>(core_->size, 2), setup);
  const int64_t* a = all.data<int64_t>();
  nccl_usable_ = true;
  for (int i = 0; i < core_->size; ++i) {
    if (a[2 * i + 1] < 0) nccl_usable_ = false;
    for (int j = 0; j < i; ++j)
      if (a[2 * i] == a[2 * j] && a[2 * i + 1] == a[2 * j + 1]) nccl_usable_ = false;
  }
#endif
  if (transport_ == CudaTransport::nccl) set_cuda_transport(transport_);  // validates the request
}

Communicator::~Communicator() {
  nccl_.reset();  // before the MPI communicator it was bootstrapped over
  mpi_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && core_ && core_->comm != MPI_COMM_NULL) MPI_Comm_free(&core_->comm);
}

int Communicator::rank() const { return core_->rank; }
int Communicator::size() const { return core_->size; }
const std::string& Communicator::axis() const { return core_->axis; }
const std::vector<int>& Communicator::world_ranks() const { return core_->world_ranks; }
MPI_Comm Communicator::mpi_comm() const { return core_->comm; }
double Communicator::timeout() const { return core_->timeout_s; }
FailurePolicy Communicator::failure_policy() const { return core_->policy; }
void Communicator::set_failure_policy(FailurePolicy p) { core_->policy = p; }

void Communicator::set_timeout(double seconds) {
  SHARDRT_CHECK(seconds > 0, ValueError, where("set_timeout"), ": timeout ", seconds, " s must be positive");
  core_->timeout_s = seconds;
}

void Communicator::set_ledger(std::shared_ptr<CommLedger> l) {
  SHARDRT_CHECK(l != nullptr, ValueError, where("set_ledger"), ": null ledger");
  ledger_ = std::move(l);
}

void Communicator::set_cuda_transport(CudaTransport t) {
#ifndef SHARDRT_WITH_NCCL
  SHARDRT_CHECK(t != CudaTransport::nccl, ValueError, where("set_cuda_transport"),
                ": NCCL requested, but ShardRT was built without it");
#endif
  SHARDRT_CHECK(t != CudaTransport::nccl || nccl_usable_, ValueError, where("set_cuda_transport"),
                ": NCCL requested, but not every rank of this communicator has its own GPU");
  transport_ = t;
}

std::string Communicator::where(const char* kind) const { return core_->where(kind); }

void Communicator::record(const char* kind, int64_t bytes) const { ledger_->record(kind, core_->axis, bytes); }

bool Communicator::checks_collectives() const { return core_->check; }
int64_t Communicator::signature_checks() const { return core_->signature_checks; }

bool Communicator::routes_to_nccl(const Tensor& t) const {
  return t.device().is_cuda() && nccl_usable_ && transport_ != CudaTransport::mpi_staged;
}

void Communicator::init_cuda() const {
#ifdef SHARDRT_WITH_NCCL
  if (nccl_ || !nccl_usable_ || transport_ == CudaTransport::mpi_staged) return;
  SHARDRT_CHECK(!core_->broken, CommError, where("init_cuda"), ": this communicator failed earlier");
  nccl_ = make_nccl_backend(core_, cuda_device_);
#endif
}

CommBackend& Communicator::host_backend(const char* kind) const {
  SHARDRT_CHECK(!core_->broken, CommError, where(kind), ": this communicator failed earlier and cannot be used");
  return *mpi_;
}

CommBackend& Communicator::backend_for(const Tensor& t, const char* kind) const {
  CommBackend& host = host_backend(kind);
  if (!routes_to_nccl(t)) return host;
  SHARDRT_CHECK(t.device().index == cuda_device_, DeviceError, where(kind), ": ", t.str(),
                " is not on this rank's GPU cuda:", cuda_device_, " (NCCL drives one GPU per rank)");
  init_cuda();
  return *nccl_;
}

CommBackend& Communicator::p2p_backend_for(const Tensor& t, const char* kind) const {
  SHARDRT_CHECK(!routes_to_nccl(t) || nccl_ != nullptr, ValueError, where(kind), ": ", t.str(),
                " would travel over NCCL, which is not initialised yet; call init_cuda() on every rank first");
  return backend_for(t, kind);
}

// ---- reductions and gathers ----

void Communicator::all_reduce(const Tensor& buf, ReduceOp op, Accumulate acc) const {
  const char* kind = "all_reduce";
  enter_collective();
  require_buffer(*core_, kind, buf, "buffer");
  require_reducible(*core_, kind, buf.dtype(), op);
  bool wide = widens(buf.dtype(), acc);
  CallSignature sig = signature_of(kind, buf);
  sig.count = buf.numel();
  sig.op = op_code(op, wide);
  check_signature(sig);
  CommBackend& be = backend_for(buf, kind);
  record(kind, buf.numel() * static_cast<int64_t>(dtype_size(wide ? DType::f32 : buf.dtype())) * (size() - 1));
  Call call = core_->call(
      kind, [=] { return detail::concat(buf.str(), " ", reduce_op_name(op), wide ? " (f32 accumulate)" : ""); });
  if (!wide) return be.all_reduce(buf, op, call);
  Tensor w32 = buf.to(DType::f32);
  be.all_reduce(w32, op, call);
  buf.copy_(w32);
}

CommHandle Communicator::all_reduce_async(const Tensor& buf, ReduceOp op, Accumulate acc) const {
  const char* kind = "all_reduce";
  enter_collective();
  require_buffer(*core_, kind, buf, "buffer");
  require_reducible(*core_, kind, buf.dtype(), op);
  const bool wide = widens(buf.dtype(), acc);
  CallSignature sig = signature_of(kind, buf);
  sig.count = buf.numel();
  sig.op = op_code(op, wide);
  check_signature(sig);
  CommBackend& be = backend_for(buf, kind);
  record(kind, buf.numel() * static_cast<int64_t>(dtype_size(wide ? DType::f32 : buf.dtype())) * (size() - 1));
  Call call = core_->call(kind, [=] {
    return detail::concat(buf.str(), " ", reduce_op_name(op), wide ? " (f32 accumulate)" : "", " (async)");
  });
  if (!wide) return CommHandle(be.start_all_reduce(buf, op, std::move(call)), nullptr);
  // 16-bit buffers travel and sum in f32; the result is rounded into `buf` once, on completion.
  Tensor w32 = buf.to(DType::f32);
  return CommHandle(be.start_all_reduce(w32, op, std::move(call)), [buf, w32] { buf.copy_(w32); });
}

void Communicator::broadcast(const Tensor& buf, int root) const {
  const char* kind = "broadcast";
  enter_collective();
  require_buffer(*core_, kind, buf, "buffer");
  SHARDRT_CHECK(root >= 0 && root < size(), ValueError, where(kind), ": root ", root,
                " is not a rank of this communicator");
  CallSignature sig = signature_of(kind, buf);
  sig.count = buf.numel();
  sig.param = root;
  check_signature(sig);
  CommBackend& be = backend_for(buf, kind);
  record(kind, rank() == root ? static_cast<int64_t>(buf.nbytes()) * (size() - 1) : 0);
  Call call = core_->call(kind, [=] { return detail::concat(buf.str(), " from rank ", root); });
  be.broadcast(buf, root, call);
}

void Communicator::barrier() const {
  const char* kind = "barrier";
  enter_collective();
  check_signature(CallSignature(kind));
  CommBackend& be = host_backend(kind);
  record(kind, 0);
  Call call = core_->call(kind);
  be.barrier(call);
}

namespace {
void require_gather_sizes(const CommCore& core, const char* kind, const Tensor& in, const Tensor& out) {
  require_buffer(core, kind, in, "input");
  require_buffer(core, kind, out, "output");
  SHARDRT_CHECK(out.numel() == in.numel() * core.size, ShapeError, core.where(kind), ": output ", out.str(),
                " must hold ", core.size, " x ", in.numel(), " elements (input ", in.str(), ")");
}
void require_scatter_sizes(const CommCore& core, const char* kind, const Tensor& in, const Tensor& out) {
  require_buffer(core, kind, in, "input");
  require_buffer(core, kind, out, "output");
  SHARDRT_CHECK(in.numel() == out.numel() * core.size, ShapeError, core.where(kind), ": input ", in.str(),
                " must hold ", core.size, " x ", out.numel(), " elements (output ", out.str(), ")");
}
}  // namespace

void Communicator::all_gather(const Tensor& in, const Tensor& out) const {
  const char* kind = "all_gather";
  enter_collective();
  require_gather_sizes(*core_, kind, in, out);
  gather_impl(kind, in, out, std::vector<int64_t>(size(), in.numel()), false);
}

void Communicator::all_gather_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts) const {
  enter_collective();
  gather_impl("all_gather_v", in, out, counts, false);
}

CommHandle Communicator::all_gather_async(const Tensor& in, const Tensor& out) const {
  const char* kind = "all_gather";
  enter_collective();
  require_gather_sizes(*core_, kind, in, out);
  return gather_impl(kind, in, out, std::vector<int64_t>(size(), in.numel()), true);
}

CommHandle Communicator::all_gather_v_async(const Tensor& in, const Tensor& out,
                                            const std::vector<int64_t>& counts) const {
  enter_collective();
  return gather_impl("all_gather_v", in, out, counts, true);
}

CommHandle Communicator::gather_impl(const char* kind, const Tensor& in, const Tensor& out,
                                     const std::vector<int64_t>& counts, bool async) const {
  require_buffer(*core_, kind, in, "input");
  require_buffer(*core_, kind, out, "output");
  require_pair(*core_, kind, in, out);
  require_counts(*core_, kind, counts, "counts");
  SHARDRT_CHECK(in.numel() == counts[rank()], ShapeError, where(kind), ": input ", in.str(), " has ", in.numel(),
                " elements but counts ", list_str(counts), " give this rank ", counts[rank()]);
  SHARDRT_CHECK(out.numel() == total(counts), ShapeError, where(kind), ": output ", out.str(), " has ", out.numel(),
                " elements but counts ", list_str(counts), " sum to ", total(counts));
  CallSignature sig = signature_of(kind, in);
  if (kind == std::string_view("all_gather")) sig.count = in.numel();
  else sig.a = counts;
  check_signature(sig);
  CommBackend& be = backend_for(in, kind);
  record(kind, static_cast<int64_t>(in.nbytes()) * (size() - 1));
  Call call =
      core_->call(kind, [=] { return detail::concat(in.str(), " -> ", out.str(), " counts ", list_str(counts)); });
  if (!async) {
    be.all_gather_v(in, out, counts, call);
    return CommHandle();
  }
  return CommHandle(be.start_all_gather_v(in, out, counts, std::move(call)), nullptr);
}

void Communicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, Accumulate acc) const {
  const char* kind = "reduce_scatter";
  enter_collective();
  require_scatter_sizes(*core_, kind, in, out);
  reduce_scatter_impl(kind, in, out, std::vector<int64_t>(size(), out.numel()), op, acc, false);
}

void Communicator::reduce_scatter_v(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts,
                                    ReduceOp op, Accumulate acc) const {
  enter_collective();
  reduce_scatter_impl("reduce_scatter_v", in, out, counts, op, acc, false);
}

CommHandle Communicator::reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op,
                                              Accumulate acc) const {
  const char* kind = "reduce_scatter";
  enter_collective();
  require_scatter_sizes(*core_, kind, in, out);
  return reduce_scatter_impl(kind, in, out, std::vector<int64_t>(size(), out.numel()), op, acc, true);
}

CommHandle Communicator::reduce_scatter_v_async(const Tensor& in, const Tensor& out,
                                                const std::vector<int64_t>& counts, ReduceOp op,
                                                Accumulate acc) const {
  enter_collective();
  return reduce_scatter_impl("reduce_scatter_v", in, out, counts, op, acc, true);
}

CommHandle Communicator::reduce_scatter_impl(const char* kind, const Tensor& in, const Tensor& out,
                                             const std::vector<int64_t>& counts, ReduceOp op, Accumulate acc,
                                             bool async) const {
  require_buffer(*core_, kind, in, "input");
  require_buffer(*core_, kind, out, "output");
  require_pair(*core_, kind, in, out);
  require_reducible(*core_, kind, in.dtype(), op);
  require_counts(*core_, kind, counts, "counts");
  SHARDRT_CHECK(out.numel() == counts[rank()], ShapeError, where(kind), ": output ", out.str(), " has ", out.numel(),
                " elements but counts ", list_str(counts), " give this rank ", counts[rank()]);
  SHARDRT_CHECK(in.numel() == total(counts), ShapeError, where(kind), ": input ", in.str(), " has ", in.numel(),
                " elements but counts ", list_str(counts), " sum to ", total(counts));
  bool wide = widens(in.dtype(), acc);
  CallSignature sig = signature_of(kind, in);
  if (kind == std::string_view("reduce_scatter")) sig.count = out.numel();
  else sig.a = counts;
  sig.op = op_code(op, wide);
  check_signature(sig);
  CommBackend& be = backend_for(in, kind);
  record(kind, (in.numel() - counts[rank()]) * static_cast<int64_t>(dtype_size(wide ? DType::f32 : in.dtype())));
  Call call = core_->call(kind, [=] {
    return detail::concat(in.str(), " -> ", out.str(), " counts ", list_str(counts), " ", reduce_op_name(op),
                          wide ? " (f32 accumulate)" : "");
  });
  if (!wide) {
    if (async) return CommHandle(be.start_reduce_scatter_v(in, out, counts, op, std::move(call)), nullptr);
    be.reduce_scatter_v(in, out, counts, op, call);
    return CommHandle();
  }
  Tensor in32 = in.to(DType::f32), out32 = Tensor::empty(out.shape(), DType::f32, out.device());
  if (async)
    return CommHandle(be.start_reduce_scatter_v(in32, out32, counts, op, std::move(call)),
                      [out, out32] { out.copy_(out32); });
  be.reduce_scatter_v(in32, out32, counts, op, call);
  out.copy_(out32);
  return CommHandle();
}

void Communicator::all_to_all(const Tensor& in, const Tensor& out) const {
  const char* kind = "all_to_all";
  enter_collective();
  require_buffer(*core_, kind, in, "input");
  require_buffer(*core_, kind, out, "output");
  SHARDRT_CHECK(in.numel() == out.numel() && in.numel() % size() == 0, ShapeError, where(kind), ": input ", in.str(),
                " and output ", out.str(), " must hold the same number of elements, a multiple of ", size());
  std::vector<int64_t> counts(size(), in.numel() / size());
  all_to_all_impl(kind, in, counts, out, counts);
}

void Communicator::all_to_all_v(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                                const std::vector<int64_t>& recv_counts) const {
  enter_collective();
  all_to_all_impl("all_to_all_v", in, send_counts, out, recv_counts);
}

void Communicator::all_to_all_impl(const char* kind, const Tensor& in, const std::vector<int64_t>& send_counts,
                                   const Tensor& out, const std::vector<int64_t>& recv_counts) const {
  require_buffer(*core_, kind, in, "input");
  require_buffer(*core_, kind, out, "output");
  require_pair(*core_, kind, in, out);
  require_counts(*core_, kind, send_counts, "send_counts");
  require_counts(*core_, kind, recv_counts, "recv_counts");
  SHARDRT_CHECK(in.numel() == total(send_counts), ShapeError, where(kind), ": input ", in.str(), " has ", in.numel(),
                " elements but send_counts ", list_str(send_counts), " sum to ", total(send_counts));
  SHARDRT_CHECK(out.numel() == total(recv_counts), ShapeError, where(kind), ": output ", out.str(), " has ",
                out.numel(), " elements but recv_counts ", list_str(recv_counts), " sum to ", total(recv_counts));
  SHARDRT_CHECK(send_counts[rank()] == recv_counts[rank()], ShapeError, where(kind), ": this rank sends itself ",
                send_counts[rank()], " elements but expects ", recv_counts[rank()]);
  CallSignature sig = signature_of(kind, in);
  if (kind == std::string_view("all_to_all")) {
    sig.count = in.numel();
  } else {
    sig.a = send_counts;
    sig.b = recv_counts;
  }
  check_signature(sig);
  CommBackend& be = backend_for(in, kind);
  record(kind, (in.numel() - send_counts[rank()]) * static_cast<int64_t>(dtype_size(in.dtype())));
  Call call = core_->call(kind, [=] {
    return detail::concat(in.str(), " -> ", out.str(), " send_counts ", list_str(send_counts), " recv_counts ",
                          list_str(recv_counts));
  });
  be.all_to_all_v(in, send_counts, out, recv_counts, call);
}

}  // namespace shardrt
