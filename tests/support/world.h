// Small helpers for tests that run under mpiexec.
#pragma once
#include <mpi.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace shardrt::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// A fresh directory shared by every rank (rank 0 makes /tmp/<prefix>-XXXXXX and broadcasts the name), removed at
// the end. A failed mkdtemp throws on every rank, so no rank is left waiting.
struct SharedTempDir {
  explicit SharedTempDir(const char* prefix) {
    char buf[256] = {0};
    if (world_rank() == 0) {
      std::snprintf(buf, sizeof buf, "/tmp/%s-XXXXXX", prefix);
      if (::mkdtemp(buf) == nullptr) buf[0] = 0;
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (buf[0] == 0) throw std::runtime_error("SharedTempDir: mkdtemp failed under /tmp");
    path = buf;
  }
  ~SharedTempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) std::filesystem::remove_all(path);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  std::string path;
};

}  // namespace shardrt::test
