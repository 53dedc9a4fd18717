/* PETSc's DMDA decides the decomposition; ShardRT takes it as it is.
 *
 *   mpiexec -n 3 petsc_dmda [train_steps]
 *
 * A 2-D Poisson problem -lap(u) = f on the unit square (u = 0 on the boundary) on a DMDA of MX x MY points, which
 * PETSc splits over the ranks in its own uneven ownership ranges (DMDAGetOwnershipRanges). Each training step
 * makes a new source f, solves for u with PETSc's KSP, and trains a FLARE surrogate of the solve in situ on the
 * pair: f and u are the DMDA vectors' own local arrays (VecGetArray), wrapped zero-copy, and each rank's box is
 * the DMDA's corners (DMDAGetCorners), passed straight to shardrt_sharded_create_points. Then the surrogate answers one
 * more source in place of a KSP solve. The loss of each step is printed, and the last one as "final loss": it is the
 * same on any number of ranks up to the solver's tolerance (examples/parity.sh compares 1..4 ranks). */
#include <math.h>
#include <petscdmda.h>
#include <petscksp.h>
#include <stdio.h>
#include <stdlib.h>

#include <shardrt.h>

#define MX 17 /* uneven over 2, 3 and 4 ranks */
#define MY 13
static const double PI = 3.14159265358979323846;

static const char* model_config =
    "{\"functional_dim\": 1, \"out_dim\": 1, \"embedding_dim\": 2, \"n_layers\": 1, \"n_hidden\": 16, "
    "\"n_head\": 2, \"slice_num\": 4, \"mlp_ratio\": 1, \"act\": \"gelu\", \"dropout\": 0.0, \"use_te\": false}";
static const char* optimizer_config = "{\"optimizer\": {\"algorithm\": \"adamw\", \"lr\": 0.001}, \"loss\": {\"kind\": \"mse\"}}";

/* ShardRT calls: on an error, every rank has the same status (SHARDRT_AGREE_ERRORS), so all stop together. */
#define SR(call)                                                                                               \
  do {                                                                                                         \
    shardrt_status s_ = (call);                                                                                \
    if (s_ != SHARDRT_OK) {                                                                                    \
      fprintf(stderr, "petsc_dmda: %s: %s: %s\n", #call, shardrt_status_name(s_), shardrt_last_error());      \
      return 1;                                                                                                \
    }                                                                                                          \
  } while (0)

/* Source k on this rank's box, x fastest (the DMDA's own local ordering). */
static PetscErrorCode fill_source(DM da, Vec f, int k) {
  PetscInt xs, ys, xm, ym;
  PetscScalar** a;
  PetscFunctionBeginUser;
  PetscCall(DMDAGetCorners(da, &xs, &ys, NULL, &xm, &ym, NULL));
  PetscCall(DMDAVecGetArray(da, f, &a));
  for (PetscInt j = ys; j < ys + ym; ++j)
    for (PetscInt i = xs; i < xs + xm; ++i) {
      const double x = (double)i / (MX - 1), y = (double)j / (MY - 1);
      a[j][i] = 10.0 * sin(PI * (1 + k % 3) * x) * sin(PI * (1 + k % 2) * y) + (double)k * x * y;
    }
  PetscCall(DMDAVecRestoreArray(da, f, &a));
  PetscFunctionReturn(0);
}

/* The 5-point Laplacian with the boundary rows as identity (u = f = 0 there is imposed by the rhs below). */
static PetscErrorCode assemble_laplacian(DM da, Mat A) {
  PetscInt xs, ys, xm, ym;
  const double hx2 = 1.0 / ((MX - 1.0) * (MX - 1.0)), hy2 = 1.0 / ((MY - 1.0) * (MY - 1.0));
  PetscFunctionBeginUser;
  PetscCall(DMDAGetCorners(da, &xs, &ys, NULL, &xm, &ym, NULL));
  for (PetscInt j = ys; j < ys + ym; ++j)
    for (PetscInt i = xs; i < xs + xm; ++i) {
      MatStencil row = {.i = i, .j = j}, col[5];
      PetscScalar v[5];
      if (i == 0 || j == 0 || i == MX - 1 || j == MY - 1) {
        v[0] = 1;
        PetscCall(MatSetValuesStencil(A, 1, &row, 1, &row, v, INSERT_VALUES));
        continue;
      }
      col[0] = (MatStencil){.i = i, .j = j - 1}, v[0] = -1 / hy2;
      col[1] = (MatStencil){.i = i - 1, .j = j}, v[1] = -1 / hx2;
      col[2] = (MatStencil){.i = i, .j = j}, v[2] = 2 / hx2 + 2 / hy2;
      col[3] = (MatStencil){.i = i + 1, .j = j}, v[3] = -1 / hx2;
      col[4] = (MatStencil){.i = i, .j = j + 1}, v[4] = -1 / hy2;
      PetscCall(MatSetValuesStencil(A, 1, &row, 5, col, v, INSERT_VALUES));
    }
  PetscCall(MatAssemblyBegin(A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(A, MAT_FINAL_ASSEMBLY));
  PetscFunctionReturn(0);
}

/* The rhs of source f: f inside, 0 on the boundary rows. */
static PetscErrorCode boundary_rhs(DM da, Vec f, Vec b) {
  PetscInt xs, ys, xm, ym;
  PetscScalar **fa, **ba;
  PetscFunctionBeginUser;
  PetscCall(DMDAGetCorners(da, &xs, &ys, NULL, &xm, &ym, NULL));
  PetscCall(DMDAVecGetArrayRead(da, f, &fa));
  PetscCall(DMDAVecGetArray(da, b, &ba));
  for (PetscInt j = ys; j < ys + ym; ++j)
    for (PetscInt i = xs; i < xs + xm; ++i)
      ba[j][i] = (i == 0 || j == 0 || i == MX - 1 || j == MY - 1) ? 0 : fa[j][i];
  PetscCall(DMDAVecRestoreArrayRead(da, f, &fa));
  PetscCall(DMDAVecRestoreArray(da, b, &ba));
  PetscFunctionReturn(0);
}

/* A DMDA vector's local array as a (1, ym, xm, 1) shard of the (1, MY, MX, 1) field: no copy. */
static int wrap_vec(shardrt_context ctx, shardrt_mesh mesh, double* data, PetscInt xs, PetscInt ys, PetscInt xm,
                    PetscInt ym, int64_t channels, shardrt_tensor* t, shardrt_sharded* s) {
  const int64_t shape[4] = {1, ym, xm, channels}, global[4] = {1, MY, MX, channels}, offsets[4] = {0, ys, xs, 0};
  SR(shardrt_tensor_wrap(t, ctx, data, SHARDRT_F64, 4, shape, NULL, SHARDRT_LAYOUT_ROW_MAJOR, SHARDRT_DEVICE_CPU,
                         SHARDRT_COPY_FORBID));
  SR(shardrt_sharded_create_points(s, mesh, *t, 4, global, offsets));
  return 0;
}

static int run(int train_steps) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(PETSC_COMM_WORLD, &rank);
  MPI_Comm_size(PETSC_COMM_WORLD, &ranks);
  DM da;
  Mat A;
  KSP ksp;
  Vec f, b, u;
  PetscCall(DMDACreate2d(PETSC_COMM_WORLD, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DMDA_STENCIL_STAR, MX, MY,
                         PETSC_DECIDE, PETSC_DECIDE, 1, 1, NULL, NULL, &da));
  PetscCall(DMSetUp(da));
  PetscInt xs, ys, xm, ym, px, py;
  const PetscInt *lx, *ly;
  PetscCall(DMDAGetCorners(da, &xs, &ys, NULL, &xm, &ym, NULL));
  PetscCall(DMDAGetInfo(da, NULL, NULL, NULL, NULL, &px, &py, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
  PetscCall(DMDAGetOwnershipRanges(da, &lx, &ly, NULL));
  if (rank == 0) {
    printf("petsc_dmda: DMDA %d x %d on %d x %d ranks, ownership ranges x [", MX, MY, (int)px, (int)py);
    for (PetscInt i = 0; i < px; ++i) printf("%s%d", i ? " " : "", (int)lx[i]);
    printf("] y [");
    for (PetscInt j = 0; j < py; ++j) printf("%s%d", j ? " " : "", (int)ly[j]);
    printf("]\n");
  }
  PetscCall(DMCreateMatrix(da, &A));
  PetscCall(assemble_laplacian(da, A));
  PetscCall(DMCreateGlobalVector(da, &f));
  PetscCall(VecDuplicate(f, &b));
  PetscCall(VecDuplicate(f, &u));
  PetscCall(KSPCreate(PETSC_COMM_WORLD, &ksp));
  PetscCall(KSPSetOperators(ksp, A, A));
  /* Unpreconditioned CG to a tight tolerance: its answer does not depend on the decomposition beyond round-off
   * (a block-Jacobi preconditioner would change with the number of ranks, and so would the training data). */
  PetscCall(KSPSetType(ksp, KSPCG));
  PC pc;
  PetscCall(KSPGetPC(ksp, &pc));
  PetscCall(PCSetType(pc, PCNONE));
  PetscCall(KSPSetTolerances(ksp, 1e-13, 1e-50, PETSC_DEFAULT, 1000));
  PetscCall(KSPSetFromOptions(ksp));

  /* The coordinates, the model's embedding, in the code's own memory (row-major over this rank's box). */
  double* xy = malloc(sizeof(double) * (size_t)(2 * xm * ym + 1));
  for (PetscInt j = 0; j < ym; ++j)
    for (PetscInt i = 0; i < xm; ++i) {
      xy[2 * (j * xm + i)] = (double)(xs + i) / (MX - 1);
      xy[2 * (j * xm + i) + 1] = (double)(ys + j) / (MY - 1);
    }

  shardrt_context ctx;
  shardrt_mesh mesh;
  shardrt_model model;
  shardrt_optimizer opt;
  SR(shardrt_context_create(&ctx, PETSC_COMM_WORLD, SHARDRT_AGREE_ERRORS));
  SR(shardrt_mesh_create(&mesh, ctx, PETSC_COMM_WORLD, 1, ranks, SHARDRT_DEVICE_CPU));
  SR(shardrt_model_create(&model, mesh, "flare", model_config, NULL, SHARDRT_F64, 7));
  SR(shardrt_optimizer_create(&opt, model, optimizer_config));

  /* PETSc's arrays stay where they are for the whole run (VecGetArray once; the KSP writes into u's array). */
  double *fa, *ua;
  PetscCall(VecGetArray(f, &fa));
  PetscCall(VecGetArray(u, &ua));
  shardrt_tensor tf, tu, te;
  shardrt_sharded sf, su, se;
  if (wrap_vec(ctx, mesh, fa, xs, ys, xm, ym, 1, &tf, &sf) || wrap_vec(ctx, mesh, ua, xs, ys, xm, ym, 1, &tu, &su) ||
      wrap_vec(ctx, mesh, xy, xs, ys, xm, ym, 2, &te, &se))
    return 1;
  PetscCall(VecRestoreArray(f, &fa));
  PetscCall(VecRestoreArray(u, &ua));
  SR(shardrt_model_set_input(model, "fx", sf));
  SR(shardrt_model_set_input(model, "embedding", se));

  double loss = 0;
  for (int step = 1; step <= train_steps; ++step) {
    PetscCall(fill_source(da, f, step));
    PetscCall(boundary_rhs(da, f, b));
    PetscCall(KSPSolve(ksp, b, u));
    SR(shardrt_train_step(opt, su, &loss));
    if (rank == 0) printf("step %d loss %.6e\n", step, loss);
  }
  if (rank == 0) printf("final loss %.17g\n", loss);

  /* One more source: the surrogate's answer next to KSP's. */
  Vec pred;
  PetscCall(VecDuplicate(u, &pred));
  double* pa;
  PetscCall(VecGetArray(pred, &pa));
  shardrt_tensor tp;
  shardrt_sharded sp;
  if (wrap_vec(ctx, mesh, pa, xs, ys, xm, ym, 1, &tp, &sp)) return 1;
  PetscCall(VecRestoreArray(pred, &pa));
  PetscCall(fill_source(da, f, train_steps + 1));
  SR(shardrt_model_forward(model, sp, 0));
  PetscCall(boundary_rhs(da, f, b));
  PetscCall(KSPSolve(ksp, b, u));
  PetscReal diff = 0, norm = 0;
  PetscCall(VecNorm(u, NORM_INFINITY, &norm));
  PetscCall(VecAXPY(pred, -1.0, u));
  PetscCall(VecNorm(pred, NORM_INFINITY, &diff));
  if (rank == 0) printf("petsc_dmda: surrogate vs KSP on a new source: max error %.3g (|u| %.3g)\n", (double)diff,
                        (double)norm);

  SR(shardrt_optimizer_destroy(opt));
  SR(shardrt_model_destroy(model));
  shardrt_sharded all_s[4] = {sf, su, se, sp};
  shardrt_tensor all_t[4] = {tf, tu, te, tp};
  for (int i = 0; i < 4; ++i) {
    SR(shardrt_sharded_destroy(all_s[i]));
    SR(shardrt_tensor_destroy(all_t[i]));
  }
  SR(shardrt_mesh_destroy(mesh));
  SR(shardrt_context_destroy(ctx));
  free(xy);
  PetscCall(VecDestroy(&pred));
  PetscCall(VecDestroy(&f));
  PetscCall(VecDestroy(&b));
  PetscCall(VecDestroy(&u));
  PetscCall(MatDestroy(&A));
  PetscCall(KSPDestroy(&ksp));
  PetscCall(DMDestroy(&da));
  return isfinite(diff) ? 0 : 1;
}

int main(int argc, char** argv) {
  PetscCall(PetscInitialize(&argc, &argv, NULL, NULL));
  const int train_steps = argc > 1 && argv[1][0] != '-' ? atoi(argv[1]) : 5;
  const int rc = run(train_steps);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, PETSC_COMM_WORLD);
  PetscCall(PetscFinalize());
  return worst;
}
