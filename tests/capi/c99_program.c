/* A C99 program on shardrt.h, compiled as C (-std=c99 -pedantic -Werror): proves the header is plain C and that a
 * C caller can run a model on its own decomposition. Returns 0, or the number of the check that failed (the test in
 * test_capi.cpp prints it with shardrt_last_error()). */
#include <math.h>
#include <string.h>

#include "shardrt.h"

#define MAX_POINTS 8
#define STEP(n, call)                   \
  do {                                  \
    if ((call) != SHARDRT_OK) return n; \
  } while (0)

int shardrt_test_c99_program(MPI_Comm comm);

int shardrt_test_c99_program(MPI_Comm comm) {
  int rank = 0, size = 1, k, r;
  int64_t n, offset = 0, total = 0;
  double fx[3 * MAX_POINTS], emb[2 * MAX_POINTS], out[2 * MAX_POINTS];
  shardrt_context ctx = {0};
  shardrt_mesh mesh = {0};
  shardrt_tensor tfx = {0}, temb = {0}, tout = {0}, tcol = {0};
  shardrt_sharded sfx = {0}, semb = {0}, sout = {0};
  shardrt_model model = {0};
  const char* config =
      "{\"functional_dim\": 3, \"out_dim\": 2, \"embedding_dim\": 2, \"n_layers\": 1, \"n_hidden\": 8, "
      "\"n_head\": 2, \"mlp_ratio\": 1, \"slice_num\": 2}";
  char message[64];
  int ndim = 0, contiguous = -1;
  int64_t shape[4];

  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  /* Rank r holds 1 + r % 3 points: uneven. */
  n = 1 + rank % 3;
  for (r = 0; r < size; ++r) {
    if (r < rank) offset += 1 + r % 3;
    total += 1 + r % 3;
  }
  for (k = 0; k < 3 * n; ++k) fx[k] = sin(0.1 * (double)(3 * offset + k));
  for (k = 0; k < 2 * n; ++k) emb[k] = cos(0.2 * (double)(2 * offset + k));

  STEP(1, shardrt_context_create(&ctx, comm, SHARDRT_AGREE_ERRORS));
  STEP(2, shardrt_mesh_create(&mesh, ctx, comm, -1, size, SHARDRT_DEVICE_AUTO));
  {
    /* A Fortran array fx(3, n) is column-major: channel fastest. As (samples, points, channels) = (1, n, 3) its
     * strides are (3n, 3, 1), which is row-major for that order: no transpose, no copy. */
    const int64_t s3[3] = {1, 0, 3}, st3[3] = {0, 3, 1};
    int64_t s[3], st[3];
    const int64_t g3[3] = {1, 0, 3}, o3[3] = {0, 0, 0};
    int64_t g[3], o[3];
    memcpy(s, s3, sizeof s), memcpy(st, st3, sizeof st), memcpy(g, g3, sizeof g), memcpy(o, o3, sizeof o);
    s[1] = n, st[0] = 3 * n, g[1] = total, o[1] = offset;
    STEP(3, shardrt_tensor_wrap(&tfx, ctx, fx, SHARDRT_F64, 3, s, st, SHARDRT_LAYOUT_ROW_MAJOR, SHARDRT_DEVICE_AUTO,
                                SHARDRT_COPY_FORBID));
    STEP(4, shardrt_tensor_is_contiguous(tfx, &contiguous));
    if (contiguous != 1) return 5;
    STEP(6, shardrt_sharded_create(&sfx, mesh, tfx, 3, g, o));
    s[2] = 2, g[2] = 2;
    STEP(7, shardrt_tensor_wrap(&temb, ctx, emb, SHARDRT_F64, 3, s, NULL, SHARDRT_LAYOUT_ROW_MAJOR,
                                SHARDRT_DEVICE_AUTO, SHARDRT_COPY_FORBID));
    STEP(8, shardrt_sharded_create(&semb, mesh, temb, 3, g, o));
    STEP(9, shardrt_tensor_wrap(&tout, ctx, out, SHARDRT_F64, 3, s, NULL, SHARDRT_LAYOUT_ROW_MAJOR,
                                SHARDRT_DEVICE_AUTO, SHARDRT_COPY_FORBID));
    STEP(10, shardrt_sharded_create(&sout, mesh, tout, 3, g, o));
  }
  /* Column-major strides computed by the library: a (3, n) array has strides (1, 3). */
  {
    const int64_t s2[2] = {3, 2};
    STEP(11, shardrt_tensor_wrap(&tcol, ctx, fx, SHARDRT_F64, 2, s2, NULL, SHARDRT_LAYOUT_COL_MAJOR,
                                 SHARDRT_DEVICE_CPU, SHARDRT_COPY_DEFAULT));
    STEP(12, shardrt_tensor_shape(tcol, &ndim, shape, 4));
    if (ndim != 2 || shape[0] != 3 || shape[1] != 2) return 13;
    STEP(14, shardrt_tensor_is_contiguous(tcol, &contiguous));
    if (contiguous != 0) return 15;
  }
  STEP(16, shardrt_model_create(&model, mesh, "flare", config, NULL, SHARDRT_F64, 1));
  STEP(17, shardrt_model_set_input(model, "fx", sfx));
  STEP(18, shardrt_model_set_input(model, "embedding", semb));
  STEP(19, shardrt_model_forward(model, sout, 0));
  for (k = 0; k < 2 * n; ++k)
    if (!(out[k] == out[k]) || out[k] == 0.0) return 20; /* finite, nonzero (NaN fails the first test) */

  /* A destroyed handle is an error with a message, not a crash. */
  STEP(21, shardrt_tensor_destroy(tcol));
  if (shardrt_tensor_destroy(tcol) != SHARDRT_ERR_INVALID_HANDLE) return 22;
  if (shardrt_last_error_copy(message, sizeof message) == 0 || strlen(message) != sizeof message - 1) return 23;
  if (strstr(shardrt_last_error(), "destroyed") == NULL) return 24;
  shardrt_clear_error();
  if (shardrt_last_status() != SHARDRT_OK || shardrt_last_error()[0] != '\0') return 25;

  STEP(26, shardrt_model_destroy(model));
  STEP(27, shardrt_sharded_destroy(sfx));
  STEP(28, shardrt_sharded_destroy(semb));
  STEP(29, shardrt_sharded_destroy(sout));
  STEP(30, shardrt_tensor_destroy(tfx));
  STEP(31, shardrt_tensor_destroy(temb));
  STEP(32, shardrt_tensor_destroy(tout));
  STEP(33, shardrt_mesh_destroy(mesh));
  STEP(34, shardrt_context_destroy(ctx));
  return 0;
}
