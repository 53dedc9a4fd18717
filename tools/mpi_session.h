// The start and end every MPI tool shares: MPI up for the program's lifetime, the command line parsed with CLI11
// alike on every rank, and the communicator options a benchmark measures with.
//
//   int main(int argc, char** argv) {
//     tools::MpiSession session(argc, argv);   // first, so that it outlives every mesh and communicator
//     CLI::App app{"what the tool does"};
//     app.add_option("--reps", reps, "...");
//     if (const auto stop = session.parse(app, argc, argv)) return *stop;
//     ...
//   }
#pragma once
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <optional>

#include "mesh/communicator.h"

namespace shardrt::tools {

class MpiSession {
 public:
  // MPI_Init, which may take MPI's own arguments out of argc and argv.
  MpiSession(int& argc, char**& argv);
  // finalize_mpi (mesh/finalize.h: MPI_Finalize under the communication deadline), once everything declared
  // after the session is gone.
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }  // in MPI_COMM_WORLD
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }

  // Parses the command line with `app`. mpiexec hands every rank the same arguments, so every rank reaches the
  // same verdict and leaves the same way, without waiting for another; only rank 0 prints the help or the error,
  // so it appears once. Returns the exit code when the program is to stop (0 after --help), else nothing.
  std::optional<int> parse(CLI::App& app, int argc, char** argv) const;

 private:
  int rank_ = 0;
  int size_ = 1;
};

// Whether a benchmark's communicator binds a GPU (by node-local rank, the library's default) or none.
enum class BenchGpu { bind_by_local_rank, none };

// Options for a benchmark's communicator: a ledger of its own, so that the figures count this benchmark's traffic
// like any job's while the process's default ledger does not grow with it.
CommOptions bench_comm_options(BenchGpu gpu);

}  // namespace shardrt::tools
