/* A C client of the C API whose rank 1 (of 3) fails inside one collective call, run by capi_faults.sh under
 * mpiexec -n 3 with a short SHARDRT_COMM_TIMEOUT:
 *   capi_fault_probe <error|kill|stop|killstart|stopstart|killbefore> <train_step|forward|save> <0|1> <workdir>
 *   capi_fault_probe verify <workdir>        (1 rank: the checkpoint left in <workdir>/ckpt)
 * The fault, sprung by the library itself at a fixed point of the call (capi_fault_inject.c):
 *   forward     rank 1's fx: error = f32 memory that forbids copies to the f64 model; kill / stop = its pages
 *               trapped; either way at the body's first read of it, before the model's first collective;
 *   train_step  the same with rank 1's target, which the step reads after the forward and before the loss and
 *               backward collectives;
 *   save        rank 1's checkpoint file (optimizer mode "mesh": every rank writes a share) passes a 512-byte
 *               file-size limit: error = EFBIG, kill / stop in the middle of writing it. Before it the run saved
 *               step 1 into the same folder and exported the parameters of steps 1 and 2 (ref-1, ref-2).
 *   killstart, stopstart: rank 1 dies (or stops) 100 ms into the call, while it waits in the ranks' start
 *               agreement for the others, who enter the call only once /proc shows it gone (or stopped);
 *   killbefore: rank 1 dies just before the call, which the others then enter: they wait in the start agreement.
 * Every live rank writes <workdir>/rank-<r>.txt: "status=<name> seconds=<s> message=<last error>" for the call,
 * timed from a barrier just before it; once every live rank has written its own (at most 20 s), the job ends by
 * MPI_Abort, as a code whose peer is gone would end. capi_faults.sh checks the files. With <agree> 1 the context has
 * SHARDRT_AGREE_ERRORS. verify loads the checkpoint on one rank, exports its parameters and compares the bytes with
 * ref-<its step>: it must be step 1 (the previous one, intact) or 2 (complete), never a mix. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capi_fault_inject.h"
#include "shardrt.h"

enum { POINTS = 10, VICTIM = 1 };
static const char* const kConfig =
    "{\"functional_dim\": 3, \"out_dim\": 2, \"embedding_dim\": 2, \"n_layers\": 2, \"n_hidden\": 16, "
    "\"n_head\": 2, \"mlp_ratio\": 1, \"slice_num\": 4}";
static const char* const kOptimizer = "{\"optimizer\": {\"algorithm\": \"adamw\", \"lr\": 0.001, \"mode\": \"mesh\"}}";
static int rank;

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    if ((call) != SHARDRT_OK) {                                                                          \
      fprintf(stderr, "capi_fault_probe: rank %d: %s failed: %s\n", rank, #call, shardrt_last_error()); \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                                      \
    }                                                                                                    \
  } while (0)

/* One rank's (1, POINTS, channels) piece of a field over 3 * POINTS points, in memory of its own pages. */
struct field {
  void* data;
  size_t bytes;
  shardrt_tensor t;
  shardrt_sharded s;
};

static void make_field(struct field* f, shardrt_context ctx, shardrt_mesh mesh, int ranks, int channels, int dtype,
                       int copy, double scale) {
  const int64_t shape[3] = {1, POINTS, channels}, global[3] = {1, (int64_t)ranks * POINTS, channels};
  const int64_t offsets[3] = {0, (int64_t)rank * POINTS, 0};
  const size_t elem = dtype == SHARDRT_F32 ? sizeof(float) : sizeof(double);
  int i;
  f->bytes = (size_t)(POINTS * channels) * elem;
  f->data = fault_alloc(f->bytes);
  for (i = 0; i < POINTS * channels; ++i) {
    const double v = scale * ((double)((rank * POINTS * channels + i) % 7) - 3.0) / 3.0;
    if (dtype == SHARDRT_F32) ((float*)f->data)[i] = (float)v;
    else ((double*)f->data)[i] = v;
  }
  CHECK(shardrt_tensor_wrap(&f->t, ctx, f->data, dtype, 3, shape, NULL, SHARDRT_LAYOUT_ROW_MAJOR, SHARDRT_DEVICE_CPU,
                            copy));
  CHECK(shardrt_sharded_create(&f->s, mesh, f->t, 3, global, offsets));
}

static void path_in(char* out, size_t cap, const char* dir, const char* name) { snprintf(out, cap, "%s/%s", dir, name); }

static int file_exists(const char* path) { return access(path, F_OK) == 0; }

/* Whole files equal, byte for byte. */
static int same_bytes(const char* a, const char* b) {
  FILE* fa = fopen(a, "rb");
  FILE* fb = fopen(b, "rb");
  int ca = 0, cb = 0, same = fa && fb;
  while (same) {
    ca = fgetc(fa), cb = fgetc(fb);
    if (ca != cb) same = 0;
    if (ca == EOF || cb == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

static int verify(const char* dir) {
  shardrt_context ctx;
  shardrt_mesh mesh;
  shardrt_model model;
  shardrt_optimizer opt;
  int64_t step = -1;
  char ckpt[4096], check[4096], ref[4096];
  path_in(ckpt, sizeof ckpt, dir, "ckpt");
  path_in(check, sizeof check, dir, "check.safetensors");
  CHECK(shardrt_context_create(&ctx, MPI_COMM_WORLD, 0));
  CHECK(shardrt_mesh_create(&mesh, ctx, MPI_COMM_WORLD, 1, 1, SHARDRT_DEVICE_CPU));
  CHECK(shardrt_model_create(&model, mesh, "flare", kConfig, NULL, SHARDRT_F64, 7));
  CHECK(shardrt_optimizer_create(&opt, model, kOptimizer));
  if (shardrt_checkpoint_load(opt, ckpt, &step) != SHARDRT_OK) {
    printf("verify: FAILED: the checkpoint does not load: %s\n", shardrt_last_error());
    return 1;
  }
  CHECK(shardrt_model_export(model, check));
  snprintf(ref, sizeof ref, "%s/ref-%lld.safetensors", dir, (long long)step);
  if ((step != 1 && step != 2) || !same_bytes(check, ref)) {
    printf("verify: FAILED: the checkpoint holds step %lld, whose parameters %s\n", (long long)step,
           step == 1 || step == 2 ? "differ from that step's" : "no run saved");
    return 1;
  }
  printf("verify: the checkpoint holds step %lld (%s), every parameter equal to that step's\n", (long long)step,
         step == 1 ? "the previous save, intact" : "the new save, complete");
  return 0;
}

/* Writes this rank's result, waits for the other live ranks' (at most 20 s), then ends the job. */
static void report_and_end(const char* dir, const char* call, int status, double seconds, int fault) {
  char path[4096], tmp[4100];
  int r, waited;
  FILE* f;
  snprintf(path, sizeof path, "%s/rank-%d.txt", dir, rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  f = fopen(tmp, "w");
  if (f) {
    fprintf(f, "call=%s status=%s seconds=%.3f message=%s\n", call, shardrt_status_name(status), seconds,
            status == SHARDRT_OK ? "" : shardrt_last_error());
    fclose(f);
    rename(tmp, path);  /* whole or absent for the driver */
  }
  printf("capi_fault_probe: rank %d: %s -> %s after %.3f s\n", rank, call, shardrt_status_name(status), seconds);
  fflush(stdout);
  for (waited = 0; waited < 2000; ++waited) {
    int all = 1;
    for (r = 0; r < 3; ++r) {
      if (r == VICTIM && fault != FAULT_ERROR) continue;
      snprintf(path, sizeof path, "%s/rank-%d.txt", dir, r);
      all = all && file_exists(path);
    }
    if (all) break;
    {
      const struct timespec ten_ms = {0, 10000000};
      nanosleep(&ten_ms, NULL);
    }
  }
  MPI_Abort(MPI_COMM_WORLD, 0);
}

int main(int argc, char** argv) {
  int ranks, fault, agree, status, victim, at_start;
  long pid, pids[3];
  const char* call;
  const char* dir;
  shardrt_context ctx;
  shardrt_mesh mesh;
  shardrt_model model;
  shardrt_optimizer opt = {0};
  struct field fx, emb, out, target, bad;
  double loss = 0, t0, seconds;
  char ckpt[4096], ref[4096];

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (argc == 3 && strcmp(argv[1], "verify") == 0) {
    status = verify(argv[2]);
    MPI_Finalize();
    return status;
  }
  if (argc != 5 || ranks != 3) {
    fprintf(stderr, "usage: mpiexec -n 3 capi_fault_probe <error|kill|stop> <train_step|forward|save> <0|1> DIR\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  fault = strncmp(argv[1], "kill", 4) == 0 ? FAULT_KILL : strncmp(argv[1], "stop", 4) == 0 ? FAULT_STOP : FAULT_ERROR;
  at_start = strstr(argv[1], "start") != NULL || strstr(argv[1], "before") != NULL;
  pid = (long)getpid();
  MPI_Allgather(&pid, 1, MPI_LONG, pids, 1, MPI_LONG, MPI_COMM_WORLD);
  call = argv[2], agree = atoi(argv[3]), dir = argv[4];
  victim = rank == VICTIM;
  path_in(ckpt, sizeof ckpt, dir, "ckpt");

  CHECK(shardrt_context_create(&ctx, MPI_COMM_WORLD, agree ? SHARDRT_AGREE_ERRORS : 0));
  CHECK(shardrt_mesh_create(&mesh, ctx, MPI_COMM_WORLD, 1, ranks, SHARDRT_DEVICE_CPU));
  CHECK(shardrt_model_create(&model, mesh, "flare", kConfig, NULL, SHARDRT_F64, 7));
  make_field(&fx, ctx, mesh, ranks, 3, SHARDRT_F64, SHARDRT_COPY_DEFAULT, 1.0);
  make_field(&emb, ctx, mesh, ranks, 2, SHARDRT_F64, SHARDRT_COPY_DEFAULT, 0.5);
  make_field(&out, ctx, mesh, ranks, 2, SHARDRT_F64, SHARDRT_COPY_DEFAULT, 0.0);
  make_field(&target, ctx, mesh, ranks, 2, SHARDRT_F64, SHARDRT_COPY_DEFAULT, 0.3);
  make_field(&bad, ctx, mesh, ranks, strcmp(call, "forward") == 0 ? 3 : 2, SHARDRT_F32, SHARDRT_COPY_FORBID, 1.0);
  CHECK(shardrt_model_set_input(model, "fx", fx.s));
  CHECK(shardrt_model_set_input(model, "embedding", emb.s));

  if (strcmp(call, "forward") == 0) {
    CHECK(shardrt_model_forward(model, out.s, 0));  /* a first forward, untouched */
  } else {
    CHECK(shardrt_optimizer_create(&opt, model, kOptimizer));
    CHECK(shardrt_train_step(opt, target.s, &loss));
  }
  if (strcmp(call, "save") == 0) {
    CHECK(shardrt_checkpoint_save(opt, ckpt));  /* the previous checkpoint: step 1 */
    path_in(ref, sizeof ref, dir, "ref-1.safetensors");
    CHECK(shardrt_model_export(model, ref));
    CHECK(shardrt_train_step(opt, target.s, &loss));
    path_in(ref, sizeof ref, dir, "ref-2.safetensors");
    CHECK(shardrt_model_export(model, ref));
  }

  if (victim && !at_start) {
    if (strcmp(call, "forward") == 0) {
      if (fault == FAULT_ERROR) CHECK(shardrt_model_set_input(model, "fx", bad.s));
      else if (fault_arm_memory(fx.data, fx.bytes, fault) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
    } else if (strcmp(call, "train_step") == 0) {
      if (fault != FAULT_ERROR && fault_arm_memory(target.data, target.bytes, fault) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
    } else if (fault_arm_file_size(512, fault) != 0) {
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (at_start && victim && fault_arm_timer(100, fault) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
  if (at_start && victim && strstr(argv[1], "before") != NULL)
    for (;;) pause();  /* the timer ends it before the call */
  if (at_start && !victim && fault_wait_for(pids[VICTIM], fault) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
  t0 = fault_now();
  if (strcmp(call, "forward") == 0) status = shardrt_model_forward(model, out.s, 0);
  else if (strcmp(call, "train_step") == 0)
    status = shardrt_train_step(opt, victim && fault == FAULT_ERROR ? bad.s : target.s, &loss);
  else status = shardrt_checkpoint_save(opt, ckpt);
  seconds = fault_now() - t0;
  fault_disarm_file_size();  /* the result file below is a file too */
  report_and_end(dir, strcmp(call, "forward") == 0 ? "shardrt_model_forward"
                      : strcmp(call, "train_step") == 0 ? "shardrt_train_step"
                                                          : "shardrt_checkpoint_save",
                 status, seconds, fault);
  return 0;
}
