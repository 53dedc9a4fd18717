#include "mesh/device_binding.h"

#include "mesh/mpi_call.h"
#include "runtime/cuda_context.h"

namespace shardrt {

NodeLocal node_local(MPI_Comm comm) {
  ErrorsReturnScope errors_return(comm);
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", "node_local");
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type",
            "node_local");
  MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
  NodeLocal out;
  int rc = MPI_Comm_rank(node, &out.rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &out.size);
  MPI_Comm_free(&node);
  check_mpi(rc, "MPI_Comm_rank/MPI_Comm_size", "node_local");
  return out;
}

Device bound_device(int local_rank) {
  int n = cuda_device_count();
  return n > 0 ? Device::cuda(local_rank % n) : Device::cpu();
}

}  // namespace shardrt
