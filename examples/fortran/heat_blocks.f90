! The C example's physics (examples/c/heat_insitu.c) on a px x py block decomposition in column-major Fortran
! arrays: a 2-D heat solver that trains a FLARE surrogate of itself in situ through ShardRT's Fortran module, then
! lets the surrogate take over part of the solve.
!
!   mpiexec -n 4 heat_blocks [train_pairs] [infer_jumps]
!
! Physics (as in C): dT/dt = alpha laplace(T) on an NX x NY grid, T = 0 on the boundary, explicit finite differences
! with alpha dt / h^2 = ALPHA. The ranks form a px x py grid (MPI_Dims_create); each holds its block of ni x nj
! points, uneven where NX or NY does not divide, in an array T(0:ni+1, 0:nj+1) with one halo layer, and exchanges
! halos with its four neighbours. No rank ever holds the global field.
!
! In-situ training (as in C): every SKIP solver steps the pair (T before, T after) of the block is one training step;
! the model learns T(t) -> T(t + SKIP dt) point-wise with the points' coordinates as FLARE's embedding. The model's
! arrays are channels-first, (channel, i, j, sample), wrapped zero-copy with order=[4,3,2,1] as the row-major
! (sample, j, i, channel) blocks of the (1, NY, NX, C) grid, which shardrt_sharded_create_points flattens into
! points. FLARE and the mean-squared loss do not depend on the order of the points, so the losses equal the C
! example's on its slabs to round-off, on any px x py (tests/install compares them: the "final loss" line).
!
! The ledger check (as in C): the collectives gathered only the box descriptions, never the field.
program heat_blocks
  use, intrinsic :: iso_fortran_env, only: real64, int64, error_unit
  use mpi_f08
  use shardrt
  implicit none

  integer, parameter :: NX = 40, NY = 24, SKIP = 4
  real(real64), parameter :: ALPHA = 0.2_real64, PI = 3.14159265358979323846_real64
  character(len=*), parameter :: FLARE = '{"functional_dim": 1, "out_dim": 1, "embedding_dim": 2, ' // &
    '"n_layers": 1, "n_hidden": 16, "n_head": 2, "mlp_ratio": 1, "slice_num": 4}'
  character(len=*), parameter :: OPTIMIZER = '{"optimizer": {"algorithm": "adamw", "lr": 0.01, ' // &
    '"weight_decay": 0.0}, "loss": {"kind": "mse"}}'

  type(MPI_Comm) :: cart
  integer :: ranks, rank, dims(2), coords(2), ierr, west, east, south, north
  integer :: ni, nj, i0, j0, i, j, k, m, train_pairs, infer_jumps
  real(real64) :: loss, err_local(2), err(2)
  real(real64), allocatable :: t(:, :), scratch(:, :)
  real(real64), allocatable, target :: fx(:, :, :, :), xy(:, :, :, :), target_t(:, :, :, :), pred(:, :, :, :)
  type(shardrt_context) :: ctx
  type(shardrt_mesh) :: mesh
  type(shardrt_model) :: model
  type(shardrt_optimizer) :: opt
  type(shardrt_tensor) :: t_fx, t_xy, t_target, t_pred
  type(shardrt_sharded) :: s_fx, s_xy, s_target, s_pred
  integer(int64) :: calls, gathered, v_bytes
  character(len=32) :: arg

  call MPI_Init(ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, ranks)
  train_pairs = 40
  infer_jumps = 3
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) train_pairs
  end if
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    read (arg, *) infer_jumps
  end if

  ! The code's own decomposition: px x py blocks, the first (N mod p) blocks of a dim one point wider.
  dims = 0
  call MPI_Dims_create(ranks, 2, dims, ierr)
  call MPI_Cart_create(MPI_COMM_WORLD, 2, dims, [.false., .false.], .false., cart, ierr)
  call MPI_Comm_rank(cart, rank)
  call MPI_Cart_coords(cart, rank, 2, coords, ierr)
  call MPI_Cart_shift(cart, 0, 1, west, east, ierr)
  call MPI_Cart_shift(cart, 1, 1, south, north, ierr)
  call block_of(NX, dims(1), coords(1), i0, ni)
  call block_of(NY, dims(2), coords(2), j0, nj)

  allocate (t(0:ni + 1, 0:nj + 1), scratch(ni, nj))
  allocate (fx(1, ni, nj, 1), xy(2, ni, nj, 1), target_t(1, ni, nj, 1), pred(1, ni, nj, 1))
  t = 0
  do j = 1, nj
    do i = 1, ni
      xy(:, i, j, 1) = [(i0 + i) / (NX + 1.0_real64), (j0 + j) / (NY + 1.0_real64)]
    end do
  end do

  ! ShardRT on the code's communicator: one domain group over all ranks; failures agreed on every rank; copies
  ! forbidden (none is needed).
  call shardrt_context_create(ctx, cart%MPI_VAL, ior(SHARDRT_AGREE_ERRORS, SHARDRT_FORBID_COPIES))
  call shardrt_mesh_create(mesh, ctx, cart%MPI_VAL, 1, ranks, SHARDRT_DEVICE_AUTO)
  call shardrt_tensor_from_array(t_fx, ctx, fx, order=[4, 3, 2, 1])
  call shardrt_tensor_from_array(t_xy, ctx, xy, order=[4, 3, 2, 1])
  call shardrt_tensor_from_array(t_target, ctx, target_t, order=[4, 3, 2, 1])
  call shardrt_tensor_from_array(t_pred, ctx, pred, order=[4, 3, 2, 1])
  call shardrt_sharded_create_points(s_fx, mesh, t_fx, 4, grid(1), box_start())
  call shardrt_sharded_create_points(s_xy, mesh, t_xy, 4, grid(2), box_start())
  call shardrt_sharded_create_points(s_target, mesh, t_target, 4, grid(1), box_start())
  call shardrt_sharded_create_points(s_pred, mesh, t_pred, 4, grid(1), box_start())
  call shardrt_model_create(model, mesh, "flare", FLARE, dtype=SHARDRT_F64, seed=2024_int64)
  call shardrt_model_set_input(model, "fx", s_fx)
  call shardrt_model_set_input(model, "embedding", s_xy)
  call shardrt_optimizer_create(opt, model, OPTIMIZER)

  ! Training: the solver runs; every SKIP steps its (before, after) pair is one training step.
  do k = 0, train_pairs - 1
    if (mod(k, 6) == 0) call initial_field(k / 6)
    fx(1, :, :, 1) = t(1:ni, 1:nj)
    do m = 1, SKIP
      call solver_step()
    end do
    target_t(1, :, :, 1) = t(1:ni, 1:nj)  ! the interior of T: the halo layer is not the model's
    call shardrt_train_step(opt, s_target, loss)
    if (rank == 0) write (*, '(a, i0, a, es13.6)') "pair ", k + 1, " loss ", loss
  end do

  ! Inference: the surrogate takes SKIP steps at a time; the finite-difference solution runs alongside.
  call initial_field(1)
  err_local = 0
  do k = 1, infer_jumps
    fx(1, :, :, 1) = t(1:ni, 1:nj)
    call shardrt_model_forward(model, s_pred, 0)
    do m = 1, SKIP
      call solver_step()
    end do
    err_local(1) = err_local(1) + sum((pred(1, :, :, 1) - t(1:ni, 1:nj))**2)
    err_local(2) = err_local(2) + sum(t(1:ni, 1:nj)**2)
    t(1:ni, 1:nj) = pred(1, :, :, 1)  ! the surrogate's field replaces the solver's
  end do
  call MPI_Allreduce(err_local, err, 2, MPI_DOUBLE_PRECISION, MPI_SUM, cart)

  ! The ledger: what was gathered is the box descriptions only (4 creations x 26 int64 from each other rank).
  call shardrt_mesh_comm_counts(mesh, "all_gather", calls, gathered)
  call shardrt_mesh_comm_counts(mesh, "all_gather_v", calls, v_bytes)
  if (gathered > 4 * 26 * 8 * (ranks - 1) .or. v_bytes /= 0 .or. gathered >= int(NX, int64) * NY * 8) then
    write (error_unit, '(*(g0))') "heat_blocks: rank ", rank, " gathered ", gathered, " + ", &
      v_bytes, " bytes: more than the box descriptions"
    error stop 3
  end if
  if (rank == 0) then
    write (*, '(*(g0))') "blocks: ", dims(1), " x ", dims(2), &
      "; rank 0 holds [", i0, ", ", i0 + ni, ") x [", j0, ", ", j0 + nj, ")"
    write (*, '(a, i0, a, i0, a, f0.4)') "surrogate relative L2 error over ", infer_jumps, " jumps of ", SKIP, &
      " steps: ", sqrt(err(1) / err(2))
    write (*, '(*(g0))') "gathered by collectives: ", gathered, " bytes (box descriptions only; the field is ", &
      NX * NY * 8, " bytes)"
    write (*, '(a, es24.17)') "final loss ", loss
  end if

  call shardrt_optimizer_destroy(opt)
  call shardrt_model_destroy(model)
  call shardrt_sharded_destroy(s_fx)
  call shardrt_sharded_destroy(s_xy)
  call shardrt_sharded_destroy(s_target)
  call shardrt_sharded_destroy(s_pred)
  call shardrt_tensor_destroy(t_fx)
  call shardrt_tensor_destroy(t_xy)
  call shardrt_tensor_destroy(t_target)
  call shardrt_tensor_destroy(t_pred)
  call shardrt_mesh_destroy(mesh)
  call shardrt_context_destroy(ctx)
  ! Arrays of the main program are never freed by the runtime (they live as long as the program), so they are
  ! released here, after the tensors that wrapped them are gone: a leak checker then sees a clean exit.
  deallocate (t, scratch, fx, xy, target_t, pred)
  call MPI_Finalize(ierr)

contains

  ! Block `c` of `p` along a dim of `n` points: its first point (0-based) and its size.
  subroutine block_of(n, p, c, first, size)
    integer, intent(in) :: n, p, c
    integer, intent(out) :: first, size
    size = n / p + merge(1, 0, c < mod(n, p))
    first = c * (n / p) + min(c, mod(n, p))
  end subroutine block_of

  ! The global grid of a model array with `channels` channels, in the tensor's order (sample, j, i, channel).
  function grid(channels) result(shape)
    integer, intent(in) :: channels
    integer(int64) :: shape(4)
    shape = [1_int64, int(NY, int64), int(NX, int64), int(channels, int64)]
  end function grid

  ! Where this rank's box starts in that order (0-based).
  function box_start() result(off)
    integer(int64) :: off(4)
    off = [0_int64, int(j0, int64), int(i0, int64), 0_int64]
  end function box_start

  ! A smooth initial field that differs per "episode" (examples/c/heat_insitu.c's).
  subroutine initial_field(episode)
    integer, intent(in) :: episode
    real(real64) :: x, y
    do j = 1, nj
      do i = 1, ni
        x = (i0 + i) / (NX + 1.0_real64)
        y = (j0 + j) / (NY + 1.0_real64)
        t(i, j) = sin(PI * x) * sin(PI * y) * (1.0_real64 + 0.3_real64 * sin(2.0_real64 * PI * (x + 0.1_real64 * episode)))
      end do
    end do
  end subroutine initial_field

  subroutine solver_step()
    call exchange_halos()
    scratch = t(1:ni, 1:nj) + ALPHA * (t(0:ni - 1, 1:nj) + t(2:ni + 1, 1:nj) + t(1:ni, 0:nj - 1) + &
                                       t(1:ni, 2:nj + 1) - 4.0_real64 * t(1:ni, 1:nj))
    t(1:ni, 1:nj) = scratch
  end subroutine solver_step

  ! The four neighbours' edges into the halo layer; at the boundary (MPI_PROC_NULL) it stays 0 (T = 0 there).
  subroutine exchange_halos()
    real(real64) :: send_i(nj), recv_i(nj), send_j(ni), recv_j(ni)
    send_i = t(ni, 1:nj)
    call MPI_Sendrecv(send_i, nj, MPI_DOUBLE_PRECISION, east, 1, recv_i, nj, MPI_DOUBLE_PRECISION, west, 1, &
                      cart, MPI_STATUS_IGNORE)
    if (west /= MPI_PROC_NULL) t(0, 1:nj) = recv_i
    send_i = t(1, 1:nj)
    call MPI_Sendrecv(send_i, nj, MPI_DOUBLE_PRECISION, west, 2, recv_i, nj, MPI_DOUBLE_PRECISION, east, 2, &
                      cart, MPI_STATUS_IGNORE)
    if (east /= MPI_PROC_NULL) t(ni + 1, 1:nj) = recv_i
    send_j = t(1:ni, nj)
    call MPI_Sendrecv(send_j, ni, MPI_DOUBLE_PRECISION, north, 3, recv_j, ni, MPI_DOUBLE_PRECISION, south, 3, &
                      cart, MPI_STATUS_IGNORE)
    if (south /= MPI_PROC_NULL) t(1:ni, 0) = recv_j
    send_j = t(1:ni, 1)
    call MPI_Sendrecv(send_j, ni, MPI_DOUBLE_PRECISION, south, 4, recv_j, ni, MPI_DOUBLE_PRECISION, north, 4, &
                      cart, MPI_STATUS_IGNORE)
    if (north /= MPI_PROC_NULL) t(1:ni, nj + 1) = recv_j
  end subroutine exchange_halos

end program heat_blocks
