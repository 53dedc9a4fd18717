// Which GPU a rank drives: the rank's index among the ranks of its node (from an MPI shared-memory split, so
// it works with any launcher and with sub-communicators) modulo the node's device count, as llm.c does.
#pragma once
#include <mpi.h>

#include "mesh/guarded_call.h"
#include "runtime/device.h"

namespace shardrt {

struct NodeLocal {
  int rank = 0;  // index among the ranks of `comm` that share this node
  int size = 1;  // ranks of `comm` on this node
};

// Collective over `comm` (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), guarded under ctx's deadline and
// policy (mesh/guarded_call.h): a rank that never calls it is a CommError naming MPI_Comm_split_type on the others.
NodeLocal node_local(MPI_Comm comm, const GuardContext& ctx = {"node_local"});
// cuda:(local_rank mod device count), or cpu when no CUDA device is usable.
Device bound_device(int local_rank);

}  // namespace shardrt
