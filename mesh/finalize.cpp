#include "mesh/finalize.h"

#include <mpi.h>

#include <cstdio>

#include "mesh/deadline.h"
#include "mesh/guarded_call.h"
#include "mesh/watchdog.h"
#include "runtime/errors.h"

namespace shardrt {

void finalize_mpi(double timeout_s) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  if (timeout_s <= 0) {
    try {
      timeout_s = default_comm_timeout();
    } catch (const ValueError& e) {
      std::fprintf(stderr, "%s (MPI_Finalize waits 300 s)\n", e.what());
      timeout_s = 300;
    }
  }
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) {  // no peer to wait for
    MPI_Finalize();
    return;
  }
  meet_before(MPI_COMM_WORLD, {"", timeout_s, FailurePolicy::abort_job}, "MPI_Finalize");
  const std::string message = CommError(detail::concat("MPI_Finalize: timed out after ", timeout_s,
                                                       " s; a peer rank has likely died. Ending this process "
                                                       "(exit status 1)")).what();
  Watchdog watchdog(message, timeout_s);
  MPI_Finalize();
}

}  // namespace shardrt
