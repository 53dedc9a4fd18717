// The end of an MPI program: finalize_mpi() instead of MPI_Finalize(), so that a peer that died or never
// finishes makes the job fail with a message instead of hanging it.
//
// 1. Every rank meets the others in a barrier on MPI_COMM_WORLD polled under the deadline (mesh/guarded_call.h).
//    A rank that does not arrive in time is reported as "CommError [rank r]: MPI_Finalize: timed out after N s
//    waiting for world ranks {...} to reach it ...", and the job is aborted (MPI_Abort): there is no caller
//    left to throw to, so the policy is always abort_job.
// 2. MPI_Finalize then runs under a watchdog with the same deadline: if it is still blocked (a peer died after
//    the barrier; OpenMPI's finalize waits for every rank), the process prints "CommError [rank r]:
//    MPI_Finalize: timed out after N s; a peer rank has likely died" and ends with exit status 1.
//
// The deadline is `timeout_s`, or SHARDRT_COMM_TIMEOUT / 300 s when 0 (a malformed variable is reported and
// 300 s used: this runs in destructors, where a throw would terminate). So ranks must reach the end within the
// deadline of one another, as they must reach every collective: a rank 0 that writes results for longer
// than that while the others wait in finalize is taken for dead — raise the deadline for such a job.
// Does nothing if MPI was never initialised or is already finalized.
#pragma once

namespace shardrt {

void finalize_mpi(double timeout_s = 0);

}  // namespace shardrt
