// NCCL transport for CUDA buffers (built only when NCCL is found). It runs on its own stream, fenced by
// events against the compute stream (current_stream(device)) on both sides, so collectives are ordered after
// the work that produced their inputs and before the work that consumes their outputs. Blocking calls also
// wait on the host, with the communicator's deadline; on expiry the NCCL communicator is aborted
// (ncclCommAbort) before the CommError is raised.
#pragma once
#include <memory>

#include "mesh/backend.h"

namespace shardrt {

// Collective over the communicator's ranks: rank 0 creates the ncclUniqueId, MPI broadcasts it, and every
// rank joins on `device`. Each rank must be bound to its own GPU.
std::unique_ptr<CommBackend> make_nccl_backend(std::shared_ptr<CommCore> core, int device);

}  // namespace shardrt
