// Contexts (MPI start-up, the copy policy and error agreement) and meshes (the code's communicator as ddp x domain).
#include <mpi.h>

#include <mutex>

#include "capi/objects.h"
#include "mesh/finalize.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"

namespace shardrt::capi {

namespace {

// Contexts that initialised MPI: the last one of them to go finalises it (the code never called MPI_Init).
std::mutex mpi_owner_mu;
int mpi_owning_contexts = 0;

void ensure_mpi(Context& ctx) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised)
    throw CapiError{SHARDRT_ERR_STATE, "MPI is already finalized: create ShardRT contexts between MPI_Init and "
                                       "MPI_Finalize"};
  if (initialised) return;
  int provided = 0;
  SHARDRT_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS, CommError,
                "MPI_Init_thread failed");
  std::lock_guard<std::mutex> lock(mpi_owner_mu);
  ctx.initialised_mpi = true;
  ++mpi_owning_contexts;
}

shardrt_status create_context(shardrt_context* out, const std::function<MPI_Comm()>& comm_of, int flags) {
  const char* fn = "shardrt_context_create";
  return entry(fn, [&] {
    require(out, fn, "out");
    out->id = 0;
    auto ctx = std::make_shared<Context>();
    ctx->flags = flags;
    ensure_mpi(*ctx);
    const MPI_Comm comm = comm_of();
    SHARDRT_CHECK(comm != MPI_COMM_NULL, ValueError, fn, ": the communicator is MPI_COMM_NULL");
    ctx->agreement = std::make_unique<Agreement>(comm, "C API context");
    // The flags are agreed too: a rank without SHARDRT_AGREE_ERRORS would skip the outcome agreements the others
    // wait in.
    ctx->agreement->run(CallId::context_create, fn, (flags & SHARDRT_AGREE_ERRORS) != 0, [&](Signature& sig) {
      SHARDRT_CHECK((flags & ~(SHARDRT_AGREE_ERRORS | SHARDRT_FORBID_COPIES | SHARDRT_CHECKED)) == 0, ValueError, fn,
                    ": flags ", flags, " hold bits other than SHARDRT_AGREE_ERRORS (1), SHARDRT_FORBID_COPIES (2) ",
                    "and SHARDRT_CHECKED (4)");
      sig.number("flags", flags);
    }, [] {});
    out->id = contexts().add(std::move(ctx));
  });
}

shardrt_status create_mesh(shardrt_mesh* out, shardrt_context c, const std::function<MPI_Comm()>& comm_of, int ddp,
                           int domain, int device) {
  const char* fn = "shardrt_mesh_create";
  return entry(fn, [&] {
    require(out, fn, "out");
    out->id = 0;
    auto ctx = open_handle(contexts(), c.id, "ctx", fn);
    const MPI_Comm comm = comm_of();
    SHARDRT_CHECK(comm != MPI_COMM_NULL, ValueError, fn, ": the communicator is MPI_COMM_NULL");
    auto m = std::make_shared<MeshObj>();
    m->ctx = ctx;
    m->agreement = std::make_unique<Agreement>(comm, "C API mesh");
    m->run(CallId::mesh_create, fn, [&](Signature& sig) {
      SHARDRT_CHECK(domain >= 1, ValueError, fn, ": domain ", domain, " must be >= 1");
      SHARDRT_CHECK(ddp >= 1 || ddp == -1, ValueError, fn, ": ddp ", ddp, " must be >= 1, or -1 to infer it");
      SHARDRT_CHECK(device >= SHARDRT_DEVICE_AUTO, ValueError, fn, ": device ", device,
                    " must be SHARDRT_DEVICE_AUTO (-2), SHARDRT_DEVICE_CPU (-1) or a GPU index");
      SHARDRT_CHECK(device < cuda_device_count(), DeviceError, fn, ": device cuda:", device, " is not usable here (",
                    cuda_device_count(), " CUDA devices visible)");
      sig.number("ddp", ddp);
      sig.number("domain", domain);
    }, [&] {
      CommOptions opts;
      // A C caller gets failures as statuses: a collective that times out throws CommError instead of aborting.
      opts.failure = FailurePolicy::throw_error;
      opts.ledger = std::make_shared<CommLedger>();
      opts.check_collectives = (ctx->flags & SHARDRT_CHECKED) != 0;  // SHARDRT_COMM_CHECK overrides it
      opts.cuda_device = device == SHARDRT_DEVICE_AUTO  ? CommOptions::bind_by_local_rank
                         : device == SHARDRT_DEVICE_CPU ? CommOptions::no_gpu
                                                        : device;
      m->mesh.emplace(comm, ddp, domain, opts);
      m->ddp = m->mesh->axis_size("ddp");
      m->domain = m->mesh->axis_size("domain");
    });
    out->id = meshes().add(std::move(m));
  });
}

}  // namespace

Context::~Context() {
  agreement.reset();  // its communicator, before MPI may be finalized below
  if (!initialised_mpi) return;
  std::lock_guard<std::mutex> lock(mpi_owner_mu);
  if (--mpi_owning_contexts == 0) finalize_mpi();
}

MeshObj::~MeshObj() {
  mesh.reset();  // its communicators first, while MPI is certainly up (each frees its own only while it is)
  agreement.reset();
}

}  // namespace shardrt::capi

using namespace shardrt;
using namespace shardrt::capi;

extern "C" {

shardrt_status shardrt_context_create(shardrt_context* out, MPI_Comm comm, int flags) {
  return create_context(out, [comm] { return comm; }, flags);
}

shardrt_status shardrt_context_create_f(shardrt_context* out, MPI_Fint comm, int flags) {
  // MPI_Comm_f2c needs MPI up, which create_context ensures before calling this.
  return create_context(out, [comm] { return MPI_Comm_f2c(comm); }, flags);
}

shardrt_status shardrt_context_destroy(shardrt_context ctx) {
  return entry("shardrt_context_destroy", [&] {
    contexts().get(ctx.id, "ctx")->closed = true;  // what was made from it refuses further calls
    contexts().remove(ctx.id, "ctx");
  });
}

shardrt_status shardrt_context_copies(shardrt_context c, int64_t* count, int64_t* bytes) {
  const char* fn = "shardrt_context_copies";
  return entry(fn, [&] {
    auto ctx = open_handle(contexts(), c.id, "ctx", fn);
    if (count) *count = ctx->copies.load();
    if (bytes) *bytes = ctx->copy_bytes.load();
  });
}

shardrt_status shardrt_mesh_create(shardrt_mesh* out, shardrt_context ctx, MPI_Comm comm, int ddp, int domain,
                                   int device) {
  return create_mesh(out, ctx, [comm] { return comm; }, ddp, domain, device);
}

shardrt_status shardrt_mesh_create_f(shardrt_mesh* out, shardrt_context ctx, MPI_Fint comm, int ddp, int domain,
                                     int device) {
  return create_mesh(out, ctx, [comm] { return MPI_Comm_f2c(comm); }, ddp, domain, device);
}

shardrt_status shardrt_mesh_destroy(shardrt_mesh mesh) {
  return entry("shardrt_mesh_destroy", [&] { meshes().remove(mesh.id, "mesh"); });
}

shardrt_status shardrt_mesh_info(shardrt_mesh mesh, int* ddp_size, int* domain_size, int* ddp_index,
                                 int* domain_index) {
  return entry("shardrt_mesh_info", [&] {
    auto m = open_handle(meshes(), mesh.id, "mesh", "shardrt_mesh_info");
    if (ddp_size) *ddp_size = m->ddp;
    if (domain_size) *domain_size = m->domain;
    if (ddp_index) *ddp_index = m->mesh->coord("ddp");
    if (domain_index) *domain_index = m->mesh->coord("domain");
  });
}

shardrt_status shardrt_mesh_comm_counts(shardrt_mesh mesh, const char* kind, int64_t* calls, int64_t* bytes_sent) {
  return entry("shardrt_mesh_comm_counts", [&] {
    auto m = open_handle(meshes(), mesh.id, "mesh", "shardrt_mesh_comm_counts");
    int64_t c = 0, b = 0;
    for (const LedgerEntry& e : m->mesh->flat().ledger().entries())
      if (!kind || e.kind == kind) c += e.calls, b += e.bytes_sent;
    if (calls) *calls = c;
    if (bytes_sent) *bytes_sent = b;
  });
}

shardrt_status shardrt_mesh_comm_reset(shardrt_mesh mesh) {
  return entry("shardrt_mesh_comm_reset", [&] {
    auto m = open_handle(meshes(), mesh.id, "mesh", "shardrt_mesh_comm_reset");
    m->mesh->set_ledger(std::make_shared<CommLedger>());
  });
}

}  // extern "C"
