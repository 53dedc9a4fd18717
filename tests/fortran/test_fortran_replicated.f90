! Replicated tensors from Fortran: a tensor every rank declares whole (offsets 0, the global extents) is replicated
! over the domain group. Two PhysicsNeMo goldens (tests/data/golden, exported by golden_raw.py as raw fp64 files):
! - flare_time_insitu: FLARE with time_input, fx and embedding split along the points (uneven, a rank without points
!   on 3 ranks), time (1,) and its grad replicated; the output, the grads of fx, embedding and time, and every
!   parameter grad must equal PhysicsNeMo's (1e-9) and a one-rank run of the same calls on MPI_COMM_SELF (1e-12);
! - vit2d: the ViT with its image rows split (whole patches), its class output (2, 5) declared replicated: whole on
!   every rank, equal to PhysicsNeMo's and the one-rank run's, like the grad of x and every parameter grad.
! Arrays are Fortran's own, dims reversed (fx(channel, point, sample)), presented to the C API with order=.
!
!   mpiexec -n 3 test_fortran_replicated GOLDEN_DIR FLARE_RAW_DIR VIT_RAW_DIR
!
! Prints one line per check; exits non-zero on any failure (every rank agrees).
program test_fortran_replicated
  use, intrinsic :: iso_fortran_env, only: real64, int64
  use, intrinsic :: iso_c_binding, only: c_loc
  use mpi_f08
  use shardrt
  implicit none

  type(shardrt_context) :: ctx, ctx1
  type(shardrt_mesh) :: mesh, mesh1
  character(len=512) :: golden, flare_raw, vit_raw
  integer :: rank, ranks, ierr, failures, all_failures
  failures = 0

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, ranks)
  call get_command_argument(1, golden)
  call get_command_argument(2, flare_raw)
  call get_command_argument(3, vit_raw)
  call shardrt_context_create(ctx, MPI_COMM_WORLD%MPI_VAL, ior(SHARDRT_AGREE_ERRORS, SHARDRT_CHECKED))
  call shardrt_mesh_create(mesh, ctx, MPI_COMM_WORLD%MPI_VAL, 1, ranks, SHARDRT_DEVICE_CPU)
  ! The one-rank run: this rank alone.
  call shardrt_context_create(ctx1, MPI_COMM_SELF%MPI_VAL, SHARDRT_AGREE_ERRORS)
  call shardrt_mesh_create(mesh1, ctx1, MPI_COMM_SELF%MPI_VAL, 1, 1, SHARDRT_DEVICE_CPU)

  call check_flare_time()
  call check_vit_class_output()

  call shardrt_mesh_destroy(mesh1)
  call shardrt_context_destroy(ctx1)
  call shardrt_mesh_destroy(mesh)
  call shardrt_context_destroy(ctx)
  call MPI_Allreduce(failures, all_failures, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) write (*, '(a, i0, a)') "test_fortran_replicated: ", all_failures, " failures"
  call MPI_Finalize(ierr)
  if (all_failures /= 0) error stop 1

contains

  ! Every rank's verdict; the line is printed by rank 0 with the worst error over the ranks.
  subroutine expect_close(err, tol, what)
    real(real64), intent(in) :: err, tol
    character(len=*), intent(in) :: what
    real(real64) :: worst
    call MPI_Allreduce(err, worst, 1, MPI_DOUBLE_PRECISION, MPI_MAX, MPI_COMM_WORLD)
    if (rank == 0) write (*, '(a, a, a, es9.2)') merge("ok    ", "FAILED", worst <= tol), what, ": ", worst
    if (.not. worst <= tol) failures = failures + 1
  end subroutine expect_close

  ! max |got - want| / max |scale|: the scale is the whole reference tensor, so a zero slice still compares.
  real(real64) function rel_err(got, want, scale)
    real(real64), intent(in) :: got(:), want(:), scale(:)
    rel_err = 0
    if (size(got) > 0) rel_err = maxval(abs(got - want))
    rel_err = rel_err / max(maxval(abs(scale)), tiny(1.0_real64))
    if (.not. maxval(abs(scale)) > 0) rel_err = huge(1.0_real64)  ! a reference of zeros compares nothing
  end function rel_err

  ! This rank's share [first, first + count) of n items in multiples of `unit`, uneven, with a rank holding none
  ! at 3 ranks and more (the rule of tests/capi/test_capi_replicated.cpp).
  subroutine share(n, unit, p, j, first, count)
    integer, intent(in) :: n, unit, p, j
    integer, intent(out) :: first, count
    integer :: u, e(4), k
    u = n / unit
    e = 0
    select case (p)
    case (1); e(1) = u
    case (2); e(1:2) = [u / 3, u - u / 3]
    case (3); e(1:3) = [u / 3, 0, u - u / 3]
    case default; e(1:4) = [u / 4, u / 4, 0, u - 2 * (u / 4)]
    end select
    first = 0
    do k = 1, j
      first = first + e(k) * unit
    end do
    count = e(j + 1) * unit
  end subroutine share

  subroutine read_raw(dir, name, a)
    character(len=*), intent(in) :: dir, name
    real(real64), intent(out) :: a(*)
    integer :: u, n
    integer(int64) :: bytes
    inquire (file=trim(dir) // "/" // name // ".f64", size=bytes)
    n = int(bytes / 8)
    open (newunit=u, file=trim(dir) // "/" // name // ".f64", access="stream", form="unformatted", status="old")
    read (u) a(1:n)
    close (u)
  end subroutine read_raw

  ! Every parameter grad of `model` (this mesh) and `model1` (one rank) against the golden's grad.* entries.
  subroutine check_parameter_grads(dir, model, model1, what)
    character(len=*), intent(in) :: dir, what
    type(shardrt_model), intent(in) :: model, model1
    character(len=256) :: name
    integer(int64) :: dims(8)
    integer :: u, ndim, ios, count
    real(real64) :: worst_golden, worst_one
    real(real64), allocatable, target :: got(:), one(:), want(:)
    type(shardrt_tensor) :: t, t1
    worst_golden = 0
    worst_one = 0
    count = 0
    open (newunit=u, file=trim(dir) // "/manifest.txt", status="old", action="read")
    do
      dims = 0
      read (u, *, iostat=ios) name, ndim, dims(1:ndim)
      if (ios /= 0) exit
      if (name(1:5) /= "grad.") cycle
      allocate (got(product(dims(1:ndim))), one(product(dims(1:ndim))), want(product(dims(1:ndim))))
      call read_raw(dir, trim(name), want)
      call shardrt_tensor_wrap(t, ctx, c_loc(got), SHARDRT_F64, ndim, dims(1:ndim), layout=SHARDRT_LAYOUT_ROW_MAJOR, &
                               device=SHARDRT_DEVICE_CPU, flags=SHARDRT_COPY_FORBID)
      call shardrt_tensor_wrap(t1, ctx1, c_loc(one), SHARDRT_F64, ndim, dims(1:ndim), &
                               layout=SHARDRT_LAYOUT_ROW_MAJOR, device=SHARDRT_DEVICE_CPU, flags=SHARDRT_COPY_FORBID)
      call shardrt_model_parameter_grad(model, trim(name(6:)), t)
      call shardrt_model_parameter_grad(model1, trim(name(6:)), t1)
      worst_golden = max(worst_golden, rel_err(got, want, want))
      worst_one = max(worst_one, rel_err(got, one, one))
      call shardrt_tensor_destroy(t)
      call shardrt_tensor_destroy(t1)
      deallocate (got, one, want)
      count = count + 1
    end do
    close (u)
    call expect_close(merge(worst_golden, huge(1.0_real64), count > 10), 1e-9_real64, &
                      what // ": every parameter grad vs PhysicsNeMo")
    call expect_close(worst_one, 1e-12_real64, what // ": every parameter grad vs the one-rank run")
  end subroutine check_parameter_grads

  ! FLARE on mesh `m` of context `c`, on points [p0, p0 + n): forward, backward, the input grads into the results.
  subroutine run_flare(c, m, p0, n, fx_all, emb_all, time, gout_all, model, out, dfx, demb, dtime)
    type(shardrt_context), intent(in) :: c
    type(shardrt_mesh), intent(in) :: m
    integer, intent(in) :: p0, n
    real(real64), intent(in) :: fx_all(:, :, :), emb_all(:, :, :), time(:), gout_all(:, :, :)
    type(shardrt_model), intent(out) :: model
    real(real64), intent(inout), target :: out(:, :, :), dfx(:, :, :), demb(:, :, :), dtime(:)
    real(real64), allocatable, target :: fx(:, :, :), emb(:, :, :), gout(:, :, :), t_here(:)
    type(shardrt_tensor) :: t(8)
    type(shardrt_sharded) :: s(8)
    integer(int64) :: g3(3), off3(3)
    integer :: k
    fx = fx_all(:, p0 + 1:p0 + n, :)      ! this rank's points only, as a simulation holds them
    emb = emb_all(:, p0 + 1:p0 + n, :)
    gout = gout_all(:, p0 + 1:p0 + n, :)
    t_here = time                         ! every rank's own copy of the time value
    call shardrt_model_create(model, m, "flare", trim(golden) // "/flare_time_insitu.config.json", &
                              trim(golden) // "/flare_time_insitu.weights.safetensors", SHARDRT_F64, 0_int64)
    call shardrt_tensor_from_array(t(1), c, fx, order=[3, 2, 1])
    call shardrt_tensor_from_array(t(2), c, emb, order=[3, 2, 1])
    call shardrt_tensor_from_array(t(3), c, out, order=[3, 2, 1])
    call shardrt_tensor_from_array(t(4), c, gout, order=[3, 2, 1])
    call shardrt_tensor_from_array(t(5), c, dfx, order=[3, 2, 1])
    call shardrt_tensor_from_array(t(6), c, demb, order=[3, 2, 1])
    call shardrt_tensor_from_array(t(7), c, t_here)
    call shardrt_tensor_from_array(t(8), c, dtime)
    off3 = [0_int64, int(p0, int64), 0_int64]  ! split: this rank's box starts at point p0
    g3 = [1_int64, int(size(fx_all, 2), int64), 2_int64]  ! fx, embedding and the output all have 2 channels
    do k = 1, 6
      call shardrt_sharded_create(s(k), m, t(k), 3, g3, off3)
    end do
    ! Replicated: every rank declares the whole box of time (1,), offsets 0.
    call shardrt_sharded_create(s(7), m, t(7), 1, [1_int64], [0_int64])
    call shardrt_sharded_create(s(8), m, t(8), 1, [1_int64], [0_int64])
    call shardrt_model_set_input(model, "fx", s(1))
    call shardrt_model_set_input(model, "embedding", s(2))
    call shardrt_model_set_input(model, "time", s(7))
    call shardrt_model_forward(model, s(3), 1)
    call shardrt_model_backward(model, s(4))
    call shardrt_model_input_grad(model, "fx", s(5))
    call shardrt_model_input_grad(model, "embedding", s(6))
    call shardrt_model_input_grad(model, "time", s(8))
    do k = 1, 8
      call shardrt_sharded_destroy(s(k))
      call shardrt_tensor_destroy(t(k))
    end do
  end subroutine run_flare

  subroutine check_flare_time()
    integer, parameter :: NP = 19
    real(real64), allocatable, target :: fx_all(:, :, :), emb_all(:, :, :), gout_all(:, :, :), ref(:, :, :)
    real(real64), allocatable, target :: out(:, :, :), dfx(:, :, :), demb(:, :, :), out1(:, :, :), dfx1(:, :, :)
    real(real64), allocatable, target :: demb1(:, :, :), ref_fx(:, :, :), ref_emb(:, :, :)
    real(real64), target :: time(1), dtime(1), dtime1(1), ref_time(1)
    type(shardrt_model) :: model, model1
    integer :: p0, n
    call share(NP, 1, ranks, rank, p0, n)
    allocate (fx_all(2, NP, 1), emb_all(2, NP, 1), gout_all(2, NP, 1), ref(2, NP, 1))
    allocate (ref_fx(2, NP, 1), ref_emb(2, NP, 1))
    allocate (out(2, n, 1), dfx(2, n, 1), demb(2, n, 1), out1(2, NP, 1), dfx1(2, NP, 1), demb1(2, NP, 1))
    call read_raw(flare_raw, "input.fx", fx_all)
    call read_raw(flare_raw, "input.embedding", emb_all)
    call read_raw(flare_raw, "input.time", time)
    call read_raw(flare_raw, "grad_output", gout_all)
    call read_raw(flare_raw, "output", ref)
    call read_raw(flare_raw, "grad_input.fx", ref_fx)
    call read_raw(flare_raw, "grad_input.embedding", ref_emb)
    call read_raw(flare_raw, "grad_input.time", ref_time)
    out = 0; dfx = 0; demb = 0; dtime = 0; out1 = 0; dfx1 = 0; demb1 = 0; dtime1 = 0
    call run_flare(ctx, mesh, p0, n, fx_all, emb_all, time, gout_all, model, out, dfx, demb, dtime)
    call run_flare(ctx1, mesh1, 0, NP, fx_all, emb_all, time, gout_all, model1, out1, dfx1, demb1, dtime1)
    if (ranks > 1 .and. n >= NP) failures = failures + 1  ! sharding must be active
    call expect_close(rel_err(pack(out, .true.), pack(ref(:, p0 + 1:p0 + n, :), .true.), pack(ref, .true.)), &
                      1e-9_real64, "FLARE time: output (split) vs PhysicsNeMo")
    call expect_close(rel_err(pack(dfx, .true.), pack(ref_fx(:, p0 + 1:p0 + n, :), .true.), pack(ref_fx, .true.)), &
                      1e-9_real64, "FLARE time: grad of fx vs PhysicsNeMo")
    call expect_close(rel_err(pack(demb, .true.), pack(ref_emb(:, p0 + 1:p0 + n, :), .true.), &
                              pack(ref_emb, .true.)), 1e-9_real64, "FLARE time: grad of embedding vs PhysicsNeMo")
    call expect_close(rel_err(dtime, ref_time, ref_time), 1e-9_real64, &
                      "FLARE time: grad of time (replicated, on every rank) vs PhysicsNeMo")
    call expect_close(rel_err(pack(out, .true.), pack(out1(:, p0 + 1:p0 + n, :), .true.), pack(out1, .true.)), &
                      1e-12_real64, "FLARE time: output vs the one-rank run")
    call expect_close(rel_err(pack(dfx, .true.), pack(dfx1(:, p0 + 1:p0 + n, :), .true.), pack(dfx1, .true.)), &
                      1e-12_real64, "FLARE time: grad of fx vs the one-rank run")
    call expect_close(rel_err(dtime, dtime1, dtime1), 1e-12_real64, "FLARE time: grad of time vs the one-rank run")
    call check_parameter_grads(flare_raw, model, model1, "FLARE time")
    call shardrt_model_destroy(model)
    call shardrt_model_destroy(model1)
  end subroutine check_flare_time

  ! The ViT on mesh `m`: the image rows [r0, r0 + h) of x, the class output replicated (whole on every rank).
  subroutine run_vit(c, m, r0, h, x_all, gout, model, out, dx)
    type(shardrt_context), intent(in) :: c
    type(shardrt_mesh), intent(in) :: m
    integer, intent(in) :: r0, h
    real(real64), intent(in) :: x_all(:, :, :, :), gout(:, :)
    type(shardrt_model), intent(out) :: model
    real(real64), intent(inout), target :: out(:, :), dx(:, :, :, :)
    real(real64), allocatable, target :: x(:, :, :, :), g(:, :)
    type(shardrt_tensor) :: t(4)
    type(shardrt_sharded) :: s(4)
    integer(int64) :: gx(4), gy(2)
    integer :: k
    x = x_all(:, r0 + 1:r0 + h, :, :)  ! x(W, rows, C, B): this rank's image rows
    g = gout
    gx = [int(size(x_all, 4), int64), int(size(x_all, 3), int64), int(size(x_all, 2), int64), &
          int(size(x_all, 1), int64)]
    gy = [int(size(out, 2), int64), int(size(out, 1), int64)]
    call shardrt_model_create(model, m, "vit", trim(golden) // "/vit2d.config.json", &
                              trim(golden) // "/vit2d.weights.safetensors", SHARDRT_F64, 0_int64)
    call shardrt_tensor_from_array(t(1), c, x, order=[4, 3, 2, 1])
    call shardrt_tensor_from_array(t(2), c, dx, order=[4, 3, 2, 1])
    call shardrt_tensor_from_array(t(3), c, out, order=[2, 1])
    call shardrt_tensor_from_array(t(4), c, g, order=[2, 1])
    ! x (B, C, H, W) split along H; the class output (B, classes) and its grad replicated: offsets 0 everywhere.
    call shardrt_sharded_create(s(1), m, t(1), 4, gx, [0_int64, 0_int64, int(r0, int64), 0_int64])
    call shardrt_sharded_create(s(2), m, t(2), 4, gx, [0_int64, 0_int64, int(r0, int64), 0_int64])
    call shardrt_sharded_create(s(3), m, t(3), 2, gy, [0_int64, 0_int64])
    call shardrt_sharded_create(s(4), m, t(4), 2, gy, [0_int64, 0_int64])
    call shardrt_model_set_input(model, "x", s(1))
    call shardrt_model_forward(model, s(3), 1)
    call shardrt_model_backward(model, s(4))
    call shardrt_model_input_grad(model, "x", s(2))
    do k = 1, 4
      call shardrt_sharded_destroy(s(k))
      call shardrt_tensor_destroy(t(k))
    end do
  end subroutine run_vit

  subroutine check_vit_class_output()
    real(real64), allocatable, target :: x_all(:, :, :, :), ref_dx(:, :, :, :), dx(:, :, :, :), dx1(:, :, :, :)
    real(real64), target :: gout(5, 2), ref(5, 2), out(5, 2), out1(5, 2)
    type(shardrt_model) :: model, model1
    integer :: r0, h
    call share(32, 4, ranks, rank, r0, h)
    allocate (x_all(24, 32, 3, 2), ref_dx(24, 32, 3, 2), dx(24, h, 3, 2), dx1(24, 32, 3, 2))
    call read_raw(vit_raw, "input.x", x_all)
    call read_raw(vit_raw, "grad_input.x", ref_dx)
    call read_raw(vit_raw, "grad_output", gout)
    call read_raw(vit_raw, "output", ref)
    out = 0; out1 = 0; dx = 0; dx1 = 0
    call run_vit(ctx, mesh, r0, h, x_all, gout, model, out, dx)
    call run_vit(ctx1, mesh1, 0, 32, x_all, gout, model1, out1, dx1)
    call expect_close(rel_err(pack(out, .true.), pack(ref, .true.), pack(ref, .true.)), 1e-9_real64, &
                      "ViT: class output (replicated, whole on every rank) vs PhysicsNeMo")
    call expect_close(rel_err(pack(out, .true.), pack(out1, .true.), pack(out1, .true.)), 1e-12_real64, &
                      "ViT: class output vs the one-rank run, on every rank")
    call expect_close(rel_err(pack(dx, .true.), pack(ref_dx(:, r0 + 1:r0 + h, :, :), .true.), &
                              pack(ref_dx, .true.)), 1e-9_real64, "ViT: grad of x (split rows) vs PhysicsNeMo")
    call check_parameter_grads(vit_raw, model, model1, "ViT")
    call shardrt_model_destroy(model)
    call shardrt_model_destroy(model1)
  end subroutine check_vit_class_output

end program test_fortran_replicated
