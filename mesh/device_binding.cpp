#include "mesh/device_binding.h"

#include "runtime/cuda_context.h"

namespace shardrt {

NodeLocal node_local(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  NodeLocal out;
  MPI_Comm_rank(node, &out.rank);
  MPI_Comm_size(node, &out.size);
  MPI_Comm_free(&node);
  return out;
}

Device bound_device(int local_rank) {
  int n = cuda_device_count();
  return n > 0 ? Device::cuda(local_rank % n) : Device::cpu();
}

}  // namespace shardrt
