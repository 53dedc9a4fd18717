// Blocking MPI calls that have no non-blocking form (MPI_Comm_split, MPI_Comm_split_type, MPI_Comm_dup,
// MPI_Finalize), made safe against a missing, hung or dead peer:
//
//   int rc = guarded_mpi_call(comm, {"Mesh(ddp=2, domain=2)", timeout_s, policy}, "MPI_Comm_split on axis 'ddp'",
//                             [&] { return MPI_Comm_split(comm, color, key, &sub); });
//
// 1. Every rank of `comm` first meets in an MPI_Ibarrier polled under the deadline, as collectives are. A rank
//    that does not arrive in time (it failed before, is stuck, or builds a different mesh) makes the others
//    fail with a CommError "<who>: <call>: timed out after N s waiting for world ranks {0, 1, 2} to reach it
//    ...", handled by the policy: thrown (throw_error) or printed and the job aborted (abort_job). Nothing else
//    was started; the abandoned barrier stays pending on `comm` until the late rank joins it.
// 2. The call itself then runs under a Watchdog with the same deadline (mesh/watchdog.h): every peer was there a
//    moment ago, so only a rank dying between the barrier and the call can block it, and then this process
//    prints "<who>: <call>: still blocked after N s ..." and ends with exit status 1, whatever the policy.
//
// Collective over `comm`; every rank passes the same call. On a 1-rank communicator neither step runs (no peer
// can block it). Costs one barrier and one watchdog thread per call (tens of microseconds): these calls happen
// when meshes and communicators are built and at the end of the job, never per step.
#pragma once
#include <mpi.h>

#include <functional>
#include <string>

#include "mesh/comm_types.h"

namespace shardrt {

// Who makes guarded calls, under which deadline and failure policy.
struct GuardContext {
  std::string who;  // names the caller in messages ("Mesh(ddp=2, domain=2)"); may be empty
  double timeout_s = 0;  // 0: default_comm_timeout()
  FailurePolicy policy = FailurePolicy::abort_job;
};

// Step 1 alone: every rank of `comm` reaches this point within the deadline, or CommError as above.
void meet_before(MPI_Comm comm, const GuardContext& ctx, const std::string& call);

// Steps 1 and 2; returns the MPI code `blocking` returned.
int guarded_mpi_call(MPI_Comm comm, const GuardContext& ctx, const std::string& call,
                     const std::function<int()>& blocking);

}  // namespace shardrt
