// The writer the kill-during-save test runs as a process of its own: a 1-rank job that saves the checkpoint
// writer_tensors(megabytes, v) with state {"version": v} for v = 1, 2, ..., printing "saving <v>" when its save starts and "saved <v>" after the commit,
// once (without "loop") or until it is killed.
// Usage: checkpoint_writer <dir> <megabytes> [loop]
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "mesh/mesh.h"
#include "optim/checkpoint.h"
#include "tests/optim/checkpoint_testing.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <dir> <megabytes> [loop]\n", argv[0]);
    return 2;
  }
  MPI_Init(&argc, &argv);
  const std::string dir = argv[1];
  const int64_t megabytes = std::atoll(argv[2]);
  const bool loop = argc > 3 && std::string(argv[3]) == "loop";
  int rc = 0;
  try {
    shardrt::Mesh mesh = shardrt::Mesh::one_d(MPI_COMM_WORLD, "ddp");
    for (int version = 1;; ++version) {
      shardrt::CheckpointContents c;
      for (const auto& t : shardrt::test::writer_tensors(megabytes, version)) {
        const int64_t n = shardrt::shape_numel(t.shape), half = n / 2;
        c.ranges.push_back({t.name, t.shape, 0, shardrt::test::flat_slice(t, 0, half)});
        c.ranges.push_back({t.name, t.shape, half, shardrt::test::flat_slice(t, half, n - half)});
      }
      c.state = {{"version", version}};
      std::printf("saving %d\n", version);
      std::fflush(stdout);
      shardrt::save_checkpoint(mesh, dir, c);
      std::printf("saved %d\n", version);
      std::fflush(stdout);
      if (!loop) break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_writer: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
