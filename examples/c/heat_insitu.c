/* heat_insitu: a 2-D heat solver that trains a FLARE surrogate of itself in situ, then lets the surrogate take over
 * part of the solve. Plain C99 + MPI + ShardRT's C API (shardrt.h, -lshardrt): nothing else.
 *
 * Physics: dT/dt = alpha * laplace(T) on an NX x NY grid, T = 0 on the boundary, explicit finite differences.
 * Decomposition: the rows are split into slabs, deliberately uneven (rank 0 takes two rows more than the others);
 * each rank stores its slab with one halo row above and below and exchanges halos with MPI_Sendrecv, as any slab
 * code does. No rank ever holds the global field.
 *
 * In-situ training: every SKIP solver steps the code hands ShardRT the pair (T before, T after) of its own slab: the
 * model learns the map T(t) -> T(t + SKIP dt) point-wise, with the points' coordinates as FLARE's embedding. The
 * slab's interior rows are contiguous, so T's interior is wrapped in place (zero-copy) as the target, and the
 * previous field is the code's own copy. After TRAIN pairs, the surrogate replaces SKIP solver steps at a time for
 * INFER jumps, and the code reports its error against the finite-difference solution it keeps alongside.
 *
 * The ledger check: after training and inference the code asks ShardRT how many bytes its collectives gathered
 * (shardrt_mesh_comm_counts): only the 26-integer box descriptions of shardrt_sharded_create, never the field
 * (an all_gather of the field would be at least NX*NY*8 bytes).
 *
 *   mpiexec -n 4 heat_insitu [train_pairs] [infer_jumps]
 *
 * Output: one line per training pair ("pair k loss L"), the surrogate's error, and "final loss L" (the last pair's),
 * which is the same on every number of ranks to round-off (tests/capi/heat_insitu.sh checks it). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <shardrt.h>

#define NX 40
#define NY 24
#define SKIP 4
#define ALPHA 0.2 /* alpha dt / h^2: stable below 0.25 */
#define PI 3.14159265358979323846

static const char* kFlare =
    "{\"functional_dim\": 1, \"out_dim\": 1, \"embedding_dim\": 2, \"n_layers\": 1, \"n_hidden\": 16, "
    "\"n_head\": 2, \"mlp_ratio\": 1, \"slice_num\": 4}";
static const char* kOptimizer =
    "{\"optimizer\": {\"algorithm\": \"adamw\", \"lr\": 0.01, \"weight_decay\": 0.0}, \"loss\": {\"kind\": \"mse\"}}";

/* Every ShardRT call goes through this: on failure the message names the call, the shapes and the rank. */
#define SRT(call)                                                                                     \
  do {                                                                                                \
    shardrt_status s_ = (call);                                                                       \
    if (s_ != SHARDRT_OK) {                                                                           \
      fprintf(stderr, "heat_insitu: %s failed: %s: %s\n", #call, shardrt_status_name(s_), shardrt_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                                   \
    }                                                                                                 \
  } while (0)

typedef struct Slab {
  int rank, size, rows, row0; /* this rank's interior rows [row0, row0 + rows) */
  double* t;                  /* (rows + 2) x NY: halo row, interior rows, halo row */
  double* scratch;
} Slab;

/* Uneven slabs: rank 0 takes two rows more than the even split, the last rank two fewer (with one rank, all). */
static void slab_rows(int rank, int size, int* rows, int* row0) {
  int r, start = 0, n = 0;
  for (r = 0; r <= rank; ++r) {
    n = NX / size + (r < NX % size ? 1 : 0);
    if (size > 1 && r == 0) n += 2;
    if (size > 1 && r == size - 1) n -= 2;
    if (r < rank) start += n;
  }
  *rows = n;
  *row0 = start;
}

static void exchange_halos(Slab* s) {
  const int up = s->rank > 0 ? s->rank - 1 : MPI_PROC_NULL, down = s->rank < s->size - 1 ? s->rank + 1 : MPI_PROC_NULL;
  MPI_Sendrecv(s->t + NY, NY, MPI_DOUBLE, up, 0, s->t + (s->rows + 1) * NY, NY, MPI_DOUBLE, down, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  MPI_Sendrecv(s->t + s->rows * NY, NY, MPI_DOUBLE, down, 1, s->t, NY, MPI_DOUBLE, up, 1, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  if (up == MPI_PROC_NULL) memset(s->t, 0, NY * sizeof(double)); /* the boundary: T = 0 */
  if (down == MPI_PROC_NULL) memset(s->t + (s->rows + 1) * NY, 0, NY * sizeof(double));
}

static void solver_step(Slab* s) {
  int i, j;
  exchange_halos(s);
  for (i = 1; i <= s->rows; ++i)
    for (j = 0; j < NY; ++j) {
      const double* c = s->t + i * NY + j;
      const double west = j > 0 ? c[-1] : 0.0, east = j < NY - 1 ? c[1] : 0.0;
      s->scratch[(i - 1) * NY + j] = *c + ALPHA * (c[-NY] + c[NY] + west + east - 4.0 * *c);
    }
  memcpy(s->t + NY, s->scratch, (size_t)s->rows * NY * sizeof(double));
}

/* A smooth initial field that differs per "episode", so the pairs the model sees vary. */
static void initial_field(Slab* s, int episode) {
  int i, j;
  for (i = 0; i < s->rows; ++i)
    for (j = 0; j < NY; ++j) {
      const double x = (s->row0 + i + 1.0) / (NX + 1.0), y = (j + 1.0) / (NY + 1.0);
      s->t[(i + 1) * NY + j] = sin(PI * x) * sin(PI * y) * (1.0 + 0.3 * sin(2.0 * PI * (x + 0.1 * episode)));
    }
}

int main(int argc, char** argv) {
  int train_pairs = argc > 1 ? atoi(argv[1]) : 40, infer_jumps = argc > 2 ? atoi(argv[2]) : 3;
  int k, i, j, m;
  Slab s;
  double loss = 0.0, err_local[2] = {0.0, 0.0}, err[2];
  double *input, *coords, *pred;
  int64_t interior;
  shardrt_context ctx;
  shardrt_mesh mesh;
  shardrt_tensor t_in, t_coords, t_target, t_pred;
  shardrt_sharded s_in, s_coords, s_target, s_pred;
  shardrt_model model;
  shardrt_optimizer opt;
  int64_t gathered_calls = 0, gathered_bytes = 0, v_bytes = 0;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.size);
  slab_rows(s.rank, s.size, &s.rows, &s.row0);
  interior = (int64_t)s.rows * NY;
  s.t = calloc((size_t)(s.rows + 2) * NY, sizeof(double));
  s.scratch = calloc((size_t)s.rows * NY, sizeof(double));
  input = calloc((size_t)interior, sizeof(double));
  pred = calloc((size_t)interior, sizeof(double));
  coords = calloc((size_t)interior * 2, sizeof(double));
  for (i = 0; i < s.rows; ++i)
    for (j = 0; j < NY; ++j) {
      coords[(i * NY + j) * 2] = (s.row0 + i + 1.0) / (NX + 1.0);
      coords[(i * NY + j) * 2 + 1] = (j + 1.0) / (NY + 1.0);
    }

  /* ShardRT on the code's communicator: one domain group over all ranks, failures agreed on every rank. */
  SRT(shardrt_context_create(&ctx, MPI_COMM_WORLD, SHARDRT_AGREE_ERRORS | SHARDRT_FORBID_COPIES));
  SRT(shardrt_mesh_create(&mesh, ctx, MPI_COMM_WORLD, 1, s.size, SHARDRT_DEVICE_AUTO));
  {
    /* Each slab is points [row0 * NY, (row0 + rows) * NY) of the (1, NX * NY, C) point set. */
    const int64_t one[3] = {1, interior, 1}, two[3] = {1, interior, 2};
    const int64_t g1[3] = {1, NX * NY, 1}, g2[3] = {1, NX * NY, 2}, offs[3] = {0, (int64_t)s.row0 * NY, 0};
    SRT(shardrt_tensor_wrap(&t_in, ctx, input, SHARDRT_F64, 3, one, NULL, SHARDRT_LAYOUT_ROW_MAJOR,
                            SHARDRT_DEVICE_AUTO, SHARDRT_COPY_DEFAULT));
    SRT(shardrt_tensor_wrap(&t_coords, ctx, coords, SHARDRT_F64, 3, two, NULL, SHARDRT_LAYOUT_ROW_MAJOR,
                            SHARDRT_DEVICE_AUTO, SHARDRT_COPY_DEFAULT));
    /* The target is the solver's own field: its interior rows, in place. */
    SRT(shardrt_tensor_wrap(&t_target, ctx, s.t + NY, SHARDRT_F64, 3, one, NULL, SHARDRT_LAYOUT_ROW_MAJOR,
                            SHARDRT_DEVICE_AUTO, SHARDRT_COPY_DEFAULT));
    SRT(shardrt_tensor_wrap(&t_pred, ctx, pred, SHARDRT_F64, 3, one, NULL, SHARDRT_LAYOUT_ROW_MAJOR,
                            SHARDRT_DEVICE_AUTO, SHARDRT_COPY_DEFAULT));
    SRT(shardrt_sharded_create(&s_in, mesh, t_in, 3, g1, offs));
    SRT(shardrt_sharded_create(&s_coords, mesh, t_coords, 3, g2, offs));
    SRT(shardrt_sharded_create(&s_target, mesh, t_target, 3, g1, offs));
    SRT(shardrt_sharded_create(&s_pred, mesh, t_pred, 3, g1, offs));
  }
  SRT(shardrt_model_create(&model, mesh, "flare", kFlare, NULL, SHARDRT_F64, 2024));
  SRT(shardrt_model_set_input(model, "fx", s_in));
  SRT(shardrt_model_set_input(model, "embedding", s_coords));
  SRT(shardrt_optimizer_create(&opt, model, kOptimizer));

  /* Training: the solver runs; every SKIP steps its (before, after) pair is one training step. */
  for (k = 0; k < train_pairs; ++k) {
    if (k % 6 == 0) initial_field(&s, k / 6);
    memcpy(input, s.t + NY, (size_t)interior * sizeof(double));
    for (m = 0; m < SKIP; ++m) solver_step(&s);
    SRT(shardrt_train_step(opt, s_target, &loss));
    if (s.rank == 0) printf("pair %d loss %.6e\n", k + 1, loss);
  }

  /* Inference: the surrogate takes SKIP steps at a time; the finite-difference solution runs alongside. */
  initial_field(&s, 1);
  for (k = 0; k < infer_jumps; ++k) {
    memcpy(input, s.t + NY, (size_t)interior * sizeof(double));
    SRT(shardrt_model_forward(model, s_pred, 0));
    for (m = 0; m < SKIP; ++m) solver_step(&s); /* the reference from the same start */
    for (i = 0; i < interior; ++i) {
      const double d = pred[i] - s.t[NY + i];
      err_local[0] += d * d, err_local[1] += s.t[NY + i] * s.t[NY + i];
    }
    memcpy(s.t + NY, pred, (size_t)interior * sizeof(double)); /* the surrogate's field replaces the solver's */
  }
  MPI_Allreduce(err_local, err, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);

  /* The ledger: what was gathered is the box descriptions only (4 creations x 26 int64 from each other rank). */
  SRT(shardrt_mesh_comm_counts(mesh, "all_gather", &gathered_calls, &gathered_bytes));
  SRT(shardrt_mesh_comm_counts(mesh, "all_gather_v", NULL, &v_bytes));
  if (gathered_bytes > 4 * 26 * 8 * (int64_t)(s.size - 1) || v_bytes != 0 ||
      gathered_bytes >= (int64_t)NX * NY * 8) {
    fprintf(stderr, "heat_insitu: rank %d gathered %lld + %lld bytes: more than the box descriptions\n", s.rank,
            (long long)gathered_bytes, (long long)v_bytes);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  if (s.rank == 0) {
    printf("slabs: rank 0 holds rows [%d, %d) of %d; %d ranks\n", s.row0, s.row0 + s.rows, NX, s.size);
    printf("surrogate relative L2 error over %d jumps of %d steps: %.4f\n", infer_jumps, SKIP, sqrt(err[0] / err[1]));
    printf("gathered by collectives: %lld bytes in %lld all_gathers (box descriptions only; the field is %d bytes)\n",
           (long long)gathered_bytes, (long long)gathered_calls, NX * NY * 8);
    printf("final loss %.17g\n", loss);
  }

  SRT(shardrt_optimizer_destroy(opt));
  SRT(shardrt_model_destroy(model));
  SRT(shardrt_sharded_destroy(s_in));
  SRT(shardrt_sharded_destroy(s_coords));
  SRT(shardrt_sharded_destroy(s_target));
  SRT(shardrt_sharded_destroy(s_pred));
  SRT(shardrt_tensor_destroy(t_in));
  SRT(shardrt_tensor_destroy(t_coords));
  SRT(shardrt_tensor_destroy(t_target));
  SRT(shardrt_tensor_destroy(t_pred));
  SRT(shardrt_mesh_destroy(mesh));
  SRT(shardrt_context_destroy(ctx));
  free(s.t), free(s.scratch), free(input), free(pred), free(coords);
  MPI_Finalize();
  return 0;
}
