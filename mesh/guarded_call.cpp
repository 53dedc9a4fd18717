#include "mesh/guarded_call.h"

#include <numeric>
#include <vector>

#include "mesh/comm_core.h"
#include "mesh/deadline.h"
#include "mesh/mpi_call.h"
#include "mesh/watchdog.h"
#include "runtime/errors.h"

namespace shardrt {

namespace {

double seconds_of(const GuardContext& ctx) { return ctx.timeout_s > 0 ? ctx.timeout_s : default_comm_timeout(); }

std::string prefix(const GuardContext& ctx, const std::string& call) {
  return ctx.who.empty() ? call : ctx.who + ": " + call;
}

// "{0, 1, 2}": the MPI_COMM_WORLD ranks of `comm`'s members. Local group calls only, so it works while a peer
// is missing.
std::string world_ranks_of(MPI_Comm comm, int size) {
  MPI_Group group, world;
  if (MPI_Comm_group(comm, &group) != MPI_SUCCESS) return "{?}";
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> local(size), global(size, -1);
  std::iota(local.begin(), local.end(), 0);
  MPI_Group_translate_ranks(group, size, local.data(), world, global.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  std::string s = "{";
  for (int i = 0; i < size; ++i) s += (i ? ", " : "") + std::to_string(global[i]);
  return s + "}";
}

[[noreturn]] void fail(const GuardContext& ctx, const std::string& message) {
  CommError err(message);
  if (ctx.policy == FailurePolicy::throw_error) throw err;
  abort_job(err.what());
}

int size_of(MPI_Comm comm, const GuardContext& ctx, const std::string& call) {
  int size = 1;
  ErrorsReturnScope errors_return(comm);
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size", prefix(ctx, call));
  return size;
}

void meet(MPI_Comm comm, int size, const GuardContext& ctx, const std::string& call) {
  const Deadline deadline(seconds_of(ctx));
  // The caller's communicator may have a fatal error handler: errors of the barrier must come back as codes.
  ErrorsReturnScope errors_return(comm);
  MPI_Request req = MPI_REQUEST_NULL;
  int rc = MPI_Ibarrier(comm, &req);
  if (rc != MPI_SUCCESS)
    fail(ctx, detail::concat(prefix(ctx, call), ": MPI_Ibarrier before it failed: ", mpi_error_string(rc)));
  PollBackoff backoff;
  for (;;) {
    int done = 0;
    rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      fail(ctx, detail::concat(prefix(ctx, call), ": MPI_Ibarrier before it failed: ", mpi_error_string(rc)));
    if (done) return;
    // The request cannot be cancelled (a collective); it completes if the late rank ever arrives.
    if (deadline.expired())
      fail(ctx, detail::concat(prefix(ctx, call), ": timed out after ", deadline.seconds(),
                               " s waiting for world ranks ", world_ranks_of(comm, size),
                               " to reach it (a peer failed, is stuck, or is building something else; the limit "
                               "comes from SHARDRT_COMM_TIMEOUT or set_timeout)"));
    backoff.pause();
  }
}

}  // namespace

void meet_before(MPI_Comm comm, const GuardContext& ctx, const std::string& call) {
  const int size = size_of(comm, ctx, call);
  if (size > 1) meet(comm, size, ctx, call);
}

int guarded_mpi_call(MPI_Comm comm, const GuardContext& ctx, const std::string& call,
                     const std::function<int()>& blocking) {
  const int size = size_of(comm, ctx, call);
  if (size == 1) return blocking();
  meet(comm, size, ctx, call);
  const double seconds = seconds_of(ctx);
  // Formatted now: the watchdog thread must not touch MPI to name the ranks when it fires.
  const std::string message = CommError(detail::concat(
      prefix(ctx, call), ": still blocked after ", seconds, " s although world ranks ", world_ranks_of(comm, size),
      " all reached it; a peer rank has likely died. Ending this process (exit status 1)")).what();
  Watchdog watchdog(message, seconds);
  return blocking();
}

}  // namespace shardrt
