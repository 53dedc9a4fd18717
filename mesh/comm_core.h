// State every backend of one communicator shares, and the single place a communication failure is turned
// into a CommError and handled according to the failure policy.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mesh/comm_types.h"
#include "mesh/deadline.h"

namespace shardrt {

// One collective in progress, as error messages describe it. The operands' description is built only when a
// message needs it: formatting shapes on every call would cost more than a small collective.
struct Call {
  const char* kind;                     // "all_reduce", "halo_exchange", ...
  std::function<std::string()> detail;  // its operands, e.g. "f32[1024] cpu sum"
  Deadline deadline;
};

struct CommCore {
  MPI_Comm comm = MPI_COMM_NULL;  // a private duplicate: ShardRT's messages never match the application's
  std::string axis;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // MPI_COMM_WORLD rank of each member, by communicator rank
  double timeout_s = 300;
  FailurePolicy policy = FailurePolicy::abort_job;
  bool broken = false;  // set after a failure under throw_error: later calls must not touch the transport
  bool check = false;   // checked mode: agree on each collective's signature first (mesh/signature.h)
  // Collectives entered on this communicator, counted before their arguments are validated, so a rank that
  // failed one locally and went on is one ahead of its peers in checked mode.
  int64_t seq = 0;
  int64_t signature_checks = 0;  // signature all-gathers issued (none unless checked and P > 1)

  // "all_reduce on axis 'domain' (rank 1 of 4, world ranks {0, 1, 2, 3})"
  std::string where(const char* kind) const;
  Call call(const char* kind, std::function<std::string()> detail = nullptr) const {
    return Call{kind, std::move(detail), Deadline(timeout_s)};
  }
  // Builds the CommError naming the call, the axis and the ranks, then prints it and aborts the job, or
  // throws it (marking the communicator broken), as the policy says.
  [[noreturn]] void fail(const Call& call, const std::string& reason);
  // "timed out after 3 s waiting for <what>"
  std::string timeout_reason(const Call& call, const std::string& waiting_for) const;
};

// Prints `message` to stderr and takes the whole job down. Ranks blocked in the same collective time out at
// about the same moment; a short grace period lets them print their own CommError before the job is torn
// down, so every rank's log says what it was waiting for.
[[noreturn]] void abort_job(const std::string& message);

}  // namespace shardrt
