// Failure probe, run by failure_probe.sh under mpiexec: the last rank fails before an all_reduce on the
// "domain" axis that every other rank enters. Those ranks must time out (SHARDRT_COMM_TIMEOUT), print a
// CommError naming the collective, the axis and the ranks, and take the job down; nobody may hang.
//   mode "throw": the last rank throws a ValueError, reports it and exits non-zero without MPI_Finalize (which
//                 is collective: calling it while peers wait in a collective is erroneous MPI, and OpenMPI can
//                 hang in it when the peers abort). The launcher must then take the whole job down, non-zero,
//                 well within the deadline.
//   mode "hang":  the last rank is stuck in local work far beyond the deadline: the others must time out,
//                 print their CommError and abort the job.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "mesh/mesh.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  shardrt::set_error_rank(rank);
  const std::string mode = argc > 1 ? argv[1] : "throw";
  int status = 0;
  try {
    shardrt::Mesh mesh = shardrt::Mesh::one_d(MPI_COMM_WORLD, "domain");
    shardrt::Tensor x = shardrt::ones({16});
    if (rank == size - 1) {
      if (mode == "hang") std::this_thread::sleep_for(std::chrono::seconds(100));
      throw shardrt::ValueError("failure probe: rank " + std::to_string(rank) + " fails before the all_reduce");
    }
    mesh.axis("domain").all_reduce(x);
    std::printf("failure probe: all_reduce returned on rank %d, which should be impossible\n", rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);  // a failed rank leaves without finalizing; see "throw" above
  }
  MPI_Finalize();
  return status;
}
