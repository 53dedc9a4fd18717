#include "mesh/comm_core.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "runtime/errors.h"

namespace shardrt {

std::string CommCore::where(const char* kind) const {
  std::string ranks;
  for (std::size_t i = 0; i < world_ranks.size(); ++i) ranks += (i ? ", " : "") + std::to_string(world_ranks[i]);
  return detail::concat(kind, " on axis '", axis, "' (rank ", rank, " of ", size, ", world ranks {", ranks, "})");
}

std::string CommCore::timeout_reason(const Call& call, const std::string& waiting_for) const {
  return detail::concat("timed out after ", call.deadline.seconds(), " s waiting for ", waiting_for,
                        " (a peer failed, is stuck, or issued a different collective; the limit comes from "
                        "SHARDRT_COMM_TIMEOUT or set_timeout)");
}

void CommCore::fail(const Call& call, const std::string& reason) {
  broken = true;
  std::string operands = call.detail ? call.detail() : std::string();
  CommError err(detail::concat(where(call.kind), operands.empty() ? "" : " ", operands, ": ", reason));
  if (policy == FailurePolicy::throw_error) throw err;
  abort_job(err.what());
}

void abort_job(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; this only documents that nothing continues past it
}

}  // namespace shardrt
