/* After MPI_Finalize, and after the context a handle was made from is destroyed, ShardRT's calls return
 * SHARDRT_ERR_STATE with a message instead of letting MPI abort the process; destroying the handles still works.
 * A plain C99 program on the header (it ends MPI itself, so it cannot live in a Catch2 binary). Exit status 0 when
 * every check holds on this rank. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "shardrt.h"

static int failures = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    ++failures;
    fprintf(stderr, "after_finalize: FAILED: %s (last error: %s)\n", what, shardrt_last_error());
  }
}

static void expect_state(shardrt_status st, const char* word, const char* what) {
  expect(st == SHARDRT_ERR_STATE && strstr(shardrt_last_error(), word) != NULL, what);
}

int main(int argc, char** argv) {
  int rank = 0, ranks = 1;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const char* flare = "{\"functional_dim\": 1, \"out_dim\": 1, \"embedding_dim\": 1, \"n_layers\": 1, "
                      "\"n_hidden\": 8, \"n_head\": 2, \"mlp_ratio\": 1, \"slice_num\": 2}";
  double fx[4] = {0.1, 0.2, 0.3, 0.4}, emb[4] = {1, 2, 3, 4}, out[4] = {0};
  const int64_t shape[3] = {1, 4, 1};
  int64_t global[3] = {1, 4, 1}, offs[3] = {0, 0, 0};
  global[1] = 4 * ranks, offs[1] = 4 * rank;
  shardrt_context ctx, ctx2;
  shardrt_mesh mesh, mesh2;
  shardrt_tensor t[3];
  shardrt_sharded s[3];
  shardrt_model model, orphan;
  int i;
  double* mem[3] = {fx, emb, out};
  expect(shardrt_context_create(&ctx, MPI_COMM_WORLD, SHARDRT_AGREE_ERRORS) == SHARDRT_OK, "context");
  expect(shardrt_mesh_create(&mesh, ctx, MPI_COMM_WORLD, 1, ranks, SHARDRT_DEVICE_CPU) == SHARDRT_OK, "mesh");
  for (i = 0; i < 3; ++i) {
    expect(shardrt_tensor_wrap(&t[i], ctx, mem[i], SHARDRT_F64, 3, shape, NULL, SHARDRT_LAYOUT_ROW_MAJOR,
                               SHARDRT_DEVICE_CPU, SHARDRT_COPY_DEFAULT) == SHARDRT_OK, "wrap");
    expect(shardrt_sharded_create(&s[i], mesh, t[i], 3, global, offs) == SHARDRT_OK, "sharded");
  }
  expect(shardrt_model_create(&model, mesh, "flare", flare, NULL, SHARDRT_F64, 1) == SHARDRT_OK, "model");
  expect(shardrt_model_set_input(model, "fx", s[0]) == SHARDRT_OK, "fx");
  expect(shardrt_model_set_input(model, "embedding", s[1]) == SHARDRT_OK, "embedding");
  expect(shardrt_model_forward(model, s[2], 0) == SHARDRT_OK, "a forward before the end");

  /* A model whose context is destroyed: it refuses every call but its destroy. */
  expect(shardrt_context_create(&ctx2, MPI_COMM_WORLD, 0) == SHARDRT_OK, "second context");
  expect(shardrt_mesh_create(&mesh2, ctx2, MPI_COMM_WORLD, 1, ranks, SHARDRT_DEVICE_CPU) == SHARDRT_OK, "mesh2");
  expect(shardrt_model_create(&orphan, mesh2, "flare", flare, NULL, SHARDRT_F64, 1) == SHARDRT_OK, "orphan");
  expect(shardrt_context_destroy(ctx2) == SHARDRT_OK, "destroying the context");
  expect_state(shardrt_model_forward(orphan, s[2], 0), "destroyed", "forward after shardrt_context_destroy");
  {
    int ddp = 0;
    expect_state(shardrt_mesh_info(mesh2, &ddp, NULL, NULL, NULL), "destroyed", "mesh_info after it");
  }
  expect(shardrt_model_destroy(orphan) == SHARDRT_OK, "destroying the orphan model");
  expect(shardrt_mesh_destroy(mesh2) == SHARDRT_OK, "destroying its mesh");

  MPI_Finalize();
  expect_state(shardrt_model_forward(model, s[2], 0), "MPI_Finalize", "forward after MPI_Finalize");
  expect_state(shardrt_model_backward(model, s[2]), "MPI_Finalize", "backward after MPI_Finalize");
  {
    shardrt_sharded late;
    expect_state(shardrt_sharded_create(&late, mesh, t[0], 3, global, offs), "MPI_Finalize", "sharded after it");
    expect(late.id == 0, "the failed creation wrote the null handle");
  }
  expect_state(shardrt_mesh_create(&mesh2, ctx, MPI_COMM_WORLD, 1, ranks, SHARDRT_DEVICE_CPU), "MPI_Finalize",
               "mesh after it");
  expect_state(shardrt_context_create(&ctx2, MPI_COMM_WORLD, 0), "finalized", "context after it");
  /* Destroying still works, in any order. */
  expect(shardrt_model_destroy(model) == SHARDRT_OK, "model destroy after MPI_Finalize");
  expect(shardrt_mesh_destroy(mesh) == SHARDRT_OK, "mesh destroy");
  for (i = 0; i < 3; ++i) {
    expect(shardrt_sharded_destroy(s[i]) == SHARDRT_OK, "sharded destroy");
    expect(shardrt_tensor_destroy(t[i]) == SHARDRT_OK, "tensor destroy");
  }
  expect(shardrt_context_destroy(ctx) == SHARDRT_OK, "context destroy");
  printf("after_finalize: rank %d of %d: %s\n", rank, ranks, failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
