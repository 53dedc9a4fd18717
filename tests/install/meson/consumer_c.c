/* A C99 program built from the installed capi/shardrt.h only: wraps this rank's piece of a field zero-copy,
 * declares it a shard of the global field, reads the global shape back, and checks that a bad call comes back as
 * a status with a message instead of ending the program. Exit status 0 when all of that holds on every rank. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "shardrt.h"

#define CHECK(call)                                                                                     \
  do {                                                                                                  \
    shardrt_status s_ = (call);                                                                         \
    if (s_ != SHARDRT_OK) {                                                                             \
      fprintf(stderr, "consumer_c: %s failed: %s: %s\n", #call, shardrt_status_name(s_), shardrt_last_error()); \
      return 1;                                                                                         \
    }                                                                                                   \
  } while (0)

static int run(int rank, int ranks) {
  shardrt_context ctx;
  shardrt_mesh mesh;
  shardrt_tensor local;
  shardrt_sharded field;
  CHECK(shardrt_context_create(&ctx, MPI_COMM_WORLD, SHARDRT_AGREE_ERRORS));
  CHECK(shardrt_mesh_create(&mesh, ctx, MPI_COMM_WORLD, 1, ranks, SHARDRT_DEVICE_CPU));
  /* Uneven slabs of a (1, 10, 3) point field: rank r holds r + 1 points, the last rank the rest. */
  int64_t start = 0, n = 0;
  for (int r = 0; r <= rank; ++r) {
    start += n;
    n = r == ranks - 1 ? 10 - start : r + 1;
  }
  double data[10 * 3];
  for (int64_t i = 0; i < n * 3; ++i) data[i] = (double)(start * 3 + i);
  const int64_t shape[3] = {1, n, 3}, global[3] = {1, 10, 3}, offsets[3] = {0, start, 0};
  CHECK(shardrt_tensor_wrap(&local, ctx, data, SHARDRT_F64, 3, shape, NULL, SHARDRT_LAYOUT_ROW_MAJOR,
                            SHARDRT_DEVICE_CPU, SHARDRT_COPY_FORBID));
  CHECK(shardrt_sharded_create(&field, mesh, local, 3, global, offsets));
  int ndim = 0;
  int64_t seen[3] = {0, 0, 0};
  CHECK(shardrt_sharded_global_shape(field, &ndim, seen, 3));
  int ok = ndim == 3 && seen[0] == 1 && seen[1] == 10 && seen[2] == 3;
  /* A destroyed handle is an error with a message, never a crash. */
  CHECK(shardrt_tensor_destroy(local));
  shardrt_status again = shardrt_tensor_destroy(local);
  ok = ok && again == SHARDRT_ERR_INVALID_HANDLE && strlen(shardrt_last_error()) > 0;
  CHECK(shardrt_sharded_destroy(field));
  CHECK(shardrt_mesh_destroy(mesh));
  CHECK(shardrt_context_destroy(ctx));
  if (rank == 0) printf("consumer_c: global shape (%lld, %lld, %lld), reused handle -> %s: %s\n", (long long)seen[0],
                        (long long)seen[1], (long long)seen[2], shardrt_status_name(again), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1, rc = 0, worst = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  rc = run(rank, ranks);
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
