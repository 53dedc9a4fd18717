#include "tools/mpi_session.h"

#include <memory>
#include <ostream>

#include "mesh/finalize.h"

namespace shardrt::tools {

MpiSession::MpiSession(int& argc, char**& argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

// Under the communication deadline: a peer that died cannot hang the end of the tool (mesh/finalize.h).
MpiSession::~MpiSession() { finalize_mpi(); }

std::optional<int> MpiSession::parse(CLI::App& app, int argc, char** argv) const {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    std::ostream discard(nullptr);  // no buffer: what the other ranks would print goes nowhere
    return is_root() ? app.exit(e) : app.exit(e, discard, discard);
  }
}

CommOptions bench_comm_options(BenchGpu gpu) {
  CommOptions opts;
  opts.ledger = std::make_shared<CommLedger>();
  if (gpu == BenchGpu::none) opts.cuda_device = CommOptions::no_gpu;
  return opts;
}

}  // namespace shardrt::tools
