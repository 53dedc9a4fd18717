! A 2-D heat solver on a px x py block decomposition (uneven blocks, column-major arrays with halos) that trains a
! FLARE surrogate in situ through ShardRT's Fortran module, then lets it replace a stretch of the time stepping.
!
!   mpiexec -n 4 heat_blocks [train_steps]
!
! Physics: u_t = u_xx + u_yy on the unit square, u = 0 on the boundary, NX x NY interior points, explicit finite
! differences. Every rank keeps only its own block (plus one halo layer) and never the global field; the model runs
! domain-parallel on those blocks as they are: the model's points are the grid points, each rank's in the order of
! its own block, and the 2-D blocks are declared to ShardRT by their global offsets.
!
! Training: the surrogate learns u(t) -> u(t + M dt). Each train step takes the solver's field as it is, runs M
! solver steps, and trains on the pair. The loss of every step is printed ("loss <step> <value>"); it does not depend
! on the decomposition (tests/install runs 1..4 ranks and compares them to round-off, and to 1 rank: the serial
! computation). No rank gathers the field: the ledger's all-gather bytes are checked against the field's size.
program heat_blocks
  use, intrinsic :: iso_fortran_env, only: real64, int64, error_unit
  use mpi_f08
  use shardrt
  implicit none

  integer, parameter :: NX = 13, NY = 11   ! interior points: uneven blocks on 2, 3 and 4 ranks
  integer, parameter :: M = 4              ! solver steps per training pair
  real(real64), parameter :: PI = acos(-1.0_real64)
  character(len=*), parameter :: MODEL_CONFIG = '{"functional_dim": 1, "out_dim": 1, "embedding_dim": 2, ' // &
    '"n_layers": 1, "n_hidden": 16, "n_head": 2, "slice_num": 4, "mlp_ratio": 1, "act": "gelu", ' // &
    '"dropout": 0.0, "use_te": false}'
  character(len=*), parameter :: OPT_CONFIG = '{"optimizer": {"algorithm": "adamw", "lr": 0.001}, ' // &
    '"loss": {"kind": "mse"}}'

  type(MPI_Comm) :: cart
  integer :: ranks, rank, dims(2), coords(2), ierr, west, east, south, north
  integer :: nxl, nyl, x0, y0, i, j, step, train_steps
  real(real64) :: hx, hy, dt, loss, err, worst
  real(real64), allocatable :: u(:, :), u_saved(:, :)
  ! The model's arrays, channels first as Fortran codes keep them; the unit dims are the sample (last) and, for
  ! fx and the prediction, the one channel: (channel, x, y, sample).
  real(real64), allocatable, target :: fx(:, :, :, :), emb(:, :, :, :), target_u(:, :, :, :), pred(:, :, :, :)
  type(shardrt_context) :: ctx
  type(shardrt_mesh) :: mesh
  type(shardrt_model) :: model
  type(shardrt_optimizer) :: opt
  type(shardrt_tensor) :: t_fx, t_emb, t_target, t_pred
  type(shardrt_sharded) :: s_fx, s_emb, s_target, s_pred
  integer(int64) :: calls, gathered, gathered_all
  character(len=32) :: arg

  call MPI_Init(ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, ranks)
  train_steps = 5
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) train_steps
  end if

  ! The simulation's own decomposition: a px x py Cartesian grid of ranks, blocks split the usual way (the first
  ! NX mod px blocks one point wider).
  dims = 0
  call MPI_Dims_create(ranks, 2, dims, ierr)
  call MPI_Cart_create(MPI_COMM_WORLD, 2, dims, [.false., .false.], .false., cart, ierr)
  call MPI_Comm_rank(cart, rank)
  call MPI_Cart_coords(cart, rank, 2, coords, ierr)
  call MPI_Cart_shift(cart, 0, 1, west, east, ierr)
  call MPI_Cart_shift(cart, 1, 1, south, north, ierr)
  call block_of(NX, dims(1), coords(1), x0, nxl)
  call block_of(NY, dims(2), coords(2), y0, nyl)

  hx = 1.0_real64 / (NX + 1)
  hy = 1.0_real64 / (NY + 1)
  dt = 0.2_real64 * min(hx, hy)**2
  allocate (u(0:nxl + 1, 0:nyl + 1), u_saved(0:nxl + 1, 0:nyl + 1))
  allocate (fx(1, nxl, nyl, 1), emb(2, nxl, nyl, 1), target_u(1, nxl, nyl, 1), pred(1, nxl, nyl, 1))
  u = 0
  do j = 1, nyl
    do i = 1, nxl
      associate (x => (x0 + i) * hx, y => (y0 + j) * hy)
        u(i, j) = sin(PI * x) * sin(PI * y) + 0.5_real64 * sin(2 * PI * x) * sin(3 * PI * y)
        emb(:, i, j, 1) = [x, y]
      end associate
    end do
  end do

  ! ShardRT on the same communicator: every rank on the domain axis (one sample, split into the blocks).
  call shardrt_context_create(ctx, cart%MPI_VAL, SHARDRT_AGREE_ERRORS)
  call shardrt_mesh_create(mesh, ctx, cart%MPI_VAL, 1, ranks, SHARDRT_DEVICE_CPU)
  call shardrt_model_create(model, mesh, "flare", MODEL_CONFIG, dtype=SHARDRT_F64, seed=7_int64)
  call shardrt_optimizer_create(opt, model, OPT_CONFIG)

  ! Wrapped once, zero-copy: order=[4,3,2,1] presents (channel, x, y, sample) as the row-major (sample, y, x,
  ! channel) that the model takes; the global box is (1, NY, NX, channels) and this rank's starts at (0, y0, x0, 0).
  call shardrt_tensor_from_array(t_fx, ctx, fx, order=[4, 3, 2, 1], flags=SHARDRT_COPY_FORBID)
  call shardrt_tensor_from_array(t_emb, ctx, emb, order=[4, 3, 2, 1], flags=SHARDRT_COPY_FORBID)
  call shardrt_tensor_from_array(t_target, ctx, target_u, order=[4, 3, 2, 1], flags=SHARDRT_COPY_FORBID)
  call shardrt_tensor_from_array(t_pred, ctx, pred, order=[4, 3, 2, 1], flags=SHARDRT_COPY_FORBID)
  call shardrt_sharded_create(s_fx, mesh, t_fx, 4, box(1), offsets())
  call shardrt_sharded_create(s_emb, mesh, t_emb, 4, box(2), offsets())
  call shardrt_sharded_create(s_target, mesh, t_target, 4, box(1), offsets())
  call shardrt_sharded_create(s_pred, mesh, t_pred, 4, box(1), offsets())
  call shardrt_model_set_input(model, "fx", s_fx)
  call shardrt_model_set_input(model, "embedding", s_emb)
  call shardrt_mesh_comm_reset(mesh)

  ! In-situ training: the fields as the solver makes them.
  do step = 1, train_steps
    fx(1, :, :, 1) = u(1:nxl, 1:nyl)
    call advance(u, M)
    target_u(1, :, :, 1) = u(1:nxl, 1:nyl)
    call shardrt_train_step(opt, s_target, loss)
    if (rank == 0) write (*, '(a, i0, 1x, es23.16)') "loss ", step, loss
  end do

  ! The surrogate replaces M solver steps once; the solver's own M steps are the check of how close it got.
  u_saved = u
  fx(1, :, :, 1) = u(1:nxl, 1:nyl)
  call shardrt_model_forward(model, s_pred, 0)
  call advance(u_saved, M)
  err = maxval(abs(pred(1, :, :, 1) - u_saved(1:nxl, 1:nyl)))
  if (nxl * nyl == 0) err = 0
  call MPI_Allreduce(err, worst, 1, MPI_DOUBLE_PRECISION, MPI_MAX, cart)
  u(1:nxl, 1:nyl) = pred(1, :, :, 1)
  call advance(u, M)

  ! No rank ever held the global field: what all ranks all-gathered is far below one copy of it.
  call shardrt_mesh_comm_counts(mesh, "all_gather", calls, gathered)
  call MPI_Allreduce(gathered, gathered_all, 1, MPI_INTEGER8, MPI_SUM, cart)
  if (rank == 0) then
    write (*, '(a, i0, a, i0, a, i0, a, i0)') "heat_blocks: ", dims(1), " x ", dims(2), " blocks, this rank ", &
      nxl, " x ", nyl
    write (*, '(a, es10.3, a, i0, a, i0, a)') "surrogate vs solver after ", M, " steps: max error ", worst, &
      "; all-gathered ", gathered_all, " bytes (the field: ", int(NX, int64) * NY * 8, ")"
  end if
  if (gathered_all >= int(NX, int64) * NY * 8 .or. .not. (worst < huge(worst))) then
    write (error_unit, '(a)') "heat_blocks: WRONG (a gather of the field, or a non-finite prediction)"
    error stop 1
  end if

  call shardrt_optimizer_destroy(opt)
  call shardrt_model_destroy(model)
  call shardrt_sharded_destroy(s_fx)
  call shardrt_sharded_destroy(s_emb)
  call shardrt_sharded_destroy(s_target)
  call shardrt_sharded_destroy(s_pred)
  call shardrt_tensor_destroy(t_fx)
  call shardrt_tensor_destroy(t_emb)
  call shardrt_tensor_destroy(t_target)
  call shardrt_tensor_destroy(t_pred)
  call shardrt_mesh_destroy(mesh)
  call shardrt_context_destroy(ctx)
  call MPI_Finalize(ierr)

contains

  ! Block `c` of `p` along a dim of `n` points: its first point (0-based) and its size.
  subroutine block_of(n, p, c, first, size)
    integer, intent(in) :: n, p, c
    integer, intent(out) :: first, size
    size = n / p + merge(1, 0, c < mod(n, p))
    first = c * (n / p) + min(c, mod(n, p))
  end subroutine block_of

  ! The global shape of a model array with `channels` channels, in the tensor's order (sample, y, x, channel).
  function box(channels) result(shape)
    integer, intent(in) :: channels
    integer(int64) :: shape(4)
    shape = [1_int64, int(NY, int64), int(NX, int64), int(channels, int64)]
  end function box

  function offsets() result(off)
    integer(int64) :: off(4)
    off = [0_int64, int(y0, int64), int(x0, int64), 0_int64]
  end function offsets

  ! `steps` explicit steps of the heat equation on this block, halos exchanged with the four neighbours first.
  subroutine advance(v, steps)
    real(real64), intent(inout) :: v(0:, 0:)
    integer, intent(in) :: steps
    real(real64) :: lap(nxl, nyl)
    integer :: s
    do s = 1, steps
      call exchange_halos(v)
      lap = (v(0:nxl - 1, 1:nyl) - 2 * v(1:nxl, 1:nyl) + v(2:nxl + 1, 1:nyl)) / hx**2 + &
            (v(1:nxl, 0:nyl - 1) - 2 * v(1:nxl, 1:nyl) + v(1:nxl, 2:nyl + 1)) / hy**2
      v(1:nxl, 1:nyl) = v(1:nxl, 1:nyl) + dt * lap
    end do
  end subroutine advance

  ! Boundary halos stay 0 (Dirichlet): MPI_PROC_NULL neighbours leave them untouched.
  subroutine exchange_halos(v)
    real(real64), intent(inout) :: v(0:, 0:)
    real(real64) :: send_x(nyl), recv_x(nyl), send_y(0:nxl + 1), recv_y(0:nxl + 1)
    ! along x: columns i = 1 and nxl
    send_x = v(nxl, 1:nyl)
    call MPI_Sendrecv(send_x, nyl, MPI_DOUBLE_PRECISION, east, 1, recv_x, nyl, MPI_DOUBLE_PRECISION, west, 1, &
                      cart, MPI_STATUS_IGNORE)
    if (west /= MPI_PROC_NULL) v(0, 1:nyl) = recv_x
    send_x = v(1, 1:nyl)
    call MPI_Sendrecv(send_x, nyl, MPI_DOUBLE_PRECISION, west, 2, recv_x, nyl, MPI_DOUBLE_PRECISION, east, 2, &
                      cart, MPI_STATUS_IGNORE)
    if (east /= MPI_PROC_NULL) v(nxl + 1, 1:nyl) = recv_x
    ! along y: rows j = 1 and nyl (halo columns included, though the 5-point stencil never reads the corners)
    send_y = v(:, nyl)
    call MPI_Sendrecv(send_y, nxl + 2, MPI_DOUBLE_PRECISION, north, 3, recv_y, nxl + 2, MPI_DOUBLE_PRECISION, &
                      south, 3, cart, MPI_STATUS_IGNORE)
    if (south /= MPI_PROC_NULL) v(:, 0) = recv_y
    send_y = v(:, 1)
    call MPI_Sendrecv(send_y, nxl + 2, MPI_DOUBLE_PRECISION, south, 4, recv_y, nxl + 2, MPI_DOUBLE_PRECISION, &
                      north, 4, cart, MPI_STATUS_IGNORE)
    if (north /= MPI_PROC_NULL) v(:, nyl + 1) = recv_y
  end subroutine exchange_halos

end program heat_blocks
