#include "mesh/device_binding.h"

#include "mesh/mpi_call.h"
#include "runtime/cuda_context.h"

namespace shardrt {

NodeLocal node_local(MPI_Comm comm, const GuardContext& ctx) {
  ErrorsReturnScope errors_return(comm);
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", ctx.who);
  MPI_Comm node = MPI_COMM_NULL;
  // No non-blocking form: the ranks meet under the deadline first, and a watchdog covers the split itself.
  const int split_rc = guarded_mpi_call(comm, ctx, "MPI_Comm_split_type (the ranks sharing a node)", [&] {
    return MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  });
  check_mpi(split_rc, "MPI_Comm_split_type", ctx.who);
  MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
  NodeLocal out;
  int rc = MPI_Comm_rank(node, &out.rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &out.size);
  MPI_Comm_free(&node);
  check_mpi(rc, "MPI_Comm_rank/MPI_Comm_size", ctx.who);
  return out;
}

Device bound_device(int local_rank) {
  int n = cuda_device_count();
  return n > 0 ? Device::cuda(local_rank % n) : Device::cpu();
}

}  // namespace shardrt
