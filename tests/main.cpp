// Test main shared by every test binary: MPI is initialised once, Catch2 runs all cases, and the failure
// count is reduced over the ranks so every rank exits with the same status. A rank whose assertion fails
// inside a case carries on to the next case; collectives that would then mismatch are bounded by the
// communicator's timeout, and each ctest entry has its own wall-clock limit.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdio>

#include "mesh/finalize.h"
#include "runtime/errors.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) shardrt::set_error_rank(rank);

  Catch::Session session;
  int rc = session.applyCommandLine(argc, argv);
  int failed = rc != 0 ? 1 : session.run();

  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && size > 1)
    std::printf("[%d ranks] %s\n", size, any_failed ? "FAILED on at least one rank" : "passed on every rank");
  shardrt::finalize_mpi();  // a rank that died cannot hang the end of the run (mesh/finalize.h)
  return any_failed ? 1 : 0;
}
