! The Fortran module (capi/shardrt.f90) against the real library: every generic overload (real32/real64, rank 1..5)
! wraps its array with the right shape; a halo-skipping section and a dim order are read through their strides
! (a model's output on them equals its output on a contiguous copy, bit for bit); bad arguments come back as
! statuses with messages through stat= (none stops the program); a zero-size array wraps. Under mpiexec -n 1 and 2.
! Prints one line per check and exits non-zero on any failure (every rank agrees).
program test_fortran_module
  use, intrinsic :: iso_fortran_env, only: real32, real64, int64
  use mpi_f08
  use shardrt
  implicit none

  character(len=*), parameter :: CONFIG = '{"functional_dim": 1, "out_dim": 1, "embedding_dim": 2, ' // &
    '"n_layers": 1, "n_hidden": 8, "n_head": 2, "slice_num": 2, "mlp_ratio": 1, "act": "gelu", ' // &
    '"dropout": 0.0, "use_te": false}'
  type(shardrt_context) :: ctx
  type(shardrt_mesh) :: mesh
  integer :: rank, ranks, ierr, failures, all_failures
  failures = 0

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, ranks)
  call shardrt_context_create(ctx, MPI_COMM_WORLD%MPI_VAL, SHARDRT_AGREE_ERRORS)
  call shardrt_mesh_create(mesh, ctx, MPI_COMM_WORLD%MPI_VAL, 1, ranks, SHARDRT_DEVICE_CPU)

  call check_overloads()
  call check_strides_by_model()
  call check_errors()

  call shardrt_mesh_destroy(mesh)
  call shardrt_context_destroy(ctx)
  call MPI_Allreduce(failures, all_failures, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) write (*, '(a, i0, a)') "test_fortran_module: ", all_failures, " failures"
  call MPI_Finalize(ierr)
  if (all_failures /= 0) error stop 1

contains

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (rank == 0) write (*, '(a, a)') merge("ok    ", "FAILED", ok), what
    if (.not. ok) failures = failures + 1
  end subroutine expect

  ! The shape and dtype a wrap reports, against what the array has.
  subroutine expect_wrap(t, dims, dtype, what)
    type(shardrt_tensor), intent(in) :: t
    integer(int64), intent(in) :: dims(:)
    integer, intent(in) :: dtype
    character(len=*), intent(in) :: what
    integer(int64) :: got(8)
    integer :: ndim, got_dtype
    got = -1
    call shardrt_tensor_shape(t, ndim, got, 8)
    call shardrt_tensor_dtype(t, got_dtype)
    call expect(ndim == size(dims) .and. all(got(1:ndim) == dims) .and. got_dtype == dtype, what)
    call shardrt_tensor_destroy(t)
  end subroutine expect_wrap

  subroutine check_overloads()
    real(real32), target :: a1(3), a2(3, 4), a3(3, 4, 2), a4(3, 4, 2, 2), a5(3, 4, 2, 2, 1)
    real(real64), target :: b1(5), b2(5, 2), b3(5, 2, 3), b4(5, 2, 3, 1), b5(2, 2, 2, 2, 2), empty(0, 4)
    type(shardrt_tensor) :: t
    integer :: contiguous
    a1 = 0; a2 = 0; a3 = 0; a4 = 0; a5 = 0; b1 = 0; b2 = 0; b3 = 0; b4 = 0; b5 = 0
    call shardrt_tensor_from_array(t, ctx, a1); call expect_wrap(t, [3_int64], SHARDRT_F32, "real32 rank 1")
    call shardrt_tensor_from_array(t, ctx, a2); call expect_wrap(t, [3_int64, 4_int64], SHARDRT_F32, "real32 rank 2")
    call shardrt_tensor_from_array(t, ctx, a3)
    call expect_wrap(t, [3_int64, 4_int64, 2_int64], SHARDRT_F32, "real32 rank 3")
    call shardrt_tensor_from_array(t, ctx, a4)
    call expect_wrap(t, [3_int64, 4_int64, 2_int64, 2_int64], SHARDRT_F32, "real32 rank 4")
    call shardrt_tensor_from_array(t, ctx, a5)
    call expect_wrap(t, [3_int64, 4_int64, 2_int64, 2_int64, 1_int64], SHARDRT_F32, "real32 rank 5")
    call shardrt_tensor_from_array(t, ctx, b1); call expect_wrap(t, [5_int64], SHARDRT_F64, "real64 rank 1")
    call shardrt_tensor_from_array(t, ctx, b2); call expect_wrap(t, [5_int64, 2_int64], SHARDRT_F64, "real64 rank 2")
    call shardrt_tensor_from_array(t, ctx, b3)
    call expect_wrap(t, [5_int64, 2_int64, 3_int64], SHARDRT_F64, "real64 rank 3")
    call shardrt_tensor_from_array(t, ctx, b4)
    call expect_wrap(t, [5_int64, 2_int64, 3_int64, 1_int64], SHARDRT_F64, "real64 rank 4")
    call shardrt_tensor_from_array(t, ctx, b5)
    call expect_wrap(t, [2_int64, 2_int64, 2_int64, 2_int64, 2_int64], SHARDRT_F64, "real64 rank 5")
    ! Column-major is not row-major contiguous; the reversed order of the same memory is.
    call shardrt_tensor_from_array(t, ctx, b3)
    call shardrt_tensor_is_contiguous(t, contiguous)
    call expect(contiguous == 0, "a column-major 5x2x3 array is not row-major contiguous")
    call shardrt_tensor_destroy(t)
    call shardrt_tensor_from_array(t, ctx, b3, order=[3, 2, 1])
    call shardrt_tensor_is_contiguous(t, contiguous)
    call expect(contiguous == 1, "order=[3,2,1] of it is row-major contiguous (no copy to flatten)")
    call expect_wrap(t, [3_int64, 2_int64, 5_int64], SHARDRT_F64, "order=[3,2,1] reverses the shape")
    call shardrt_tensor_from_array(t, ctx, b2(2:4, :))
    call shardrt_tensor_is_contiguous(t, contiguous)
    call expect(contiguous == 0, "a halo-skipping section b2(2:4, :) wraps as a strided tensor")
    call expect_wrap(t, [3_int64, 2_int64], SHARDRT_F64, "... of shape 3x2")
    call shardrt_tensor_from_array(t, ctx, empty)
    call expect_wrap(t, [0_int64, 4_int64], SHARDRT_F64, "a zero-size 0x4 array wraps")
  end subroutine check_overloads

  ! The proof that strides are honoured: a model reads the same numbers through a halo-skipping view and through a
  ! channels-first array presented by `order` as from plain contiguous copies, so its outputs agree bit for bit.
  ! One sample of N points per rank.
  subroutine check_strides_by_model()
    integer, parameter :: N = 6
    ! The "solver's" arrays: (sample, point with halos 0 and N+1, field); fields 2 and 2:3 are the model's.
    real(real64), target :: store_u(1, 0:N + 1, 2), store_xy(1, 0:N + 1, 3)
    real(real64), target :: fx(1, N, 1), xy(1, N, 2), xy_first(2, N, 1), out(1, N, 1, 3)
    type(shardrt_model) :: model
    type(shardrt_tensor) :: t(9)
    type(shardrt_sharded) :: s(9)
    integer :: i, k, run
    integer(int64) :: off(3)
    store_u = -1.0e6_real64   ! garbage wherever the model must not read
    store_xy = 1.0e6_real64
    do i = 1, N
      store_u(1, i, 2) = sin(real(i + rank * N, real64))
      store_xy(1, i, 2:3) = [real(i + rank * N, real64) / (N * ranks), cos(real(i, real64))]
    end do
    fx(1, :, 1) = store_u(1, 1:N, 2)
    xy(1, :, :) = store_xy(1, 1:N, 2:3)
    xy_first(:, :, 1) = transpose(store_xy(1, 1:N, 2:3))
    out = 0
    off = [0_int64, int(N * rank, int64), 0_int64]
    call shardrt_model_create(model, mesh, "flare", CONFIG, dtype=SHARDRT_F64, seed=3_int64)
    ! run 1: contiguous copies; run 2: the sections of the solver's arrays in place; run 3: channels first + order.
    call shardrt_tensor_from_array(t(1), ctx, fx, flags=SHARDRT_COPY_ALLOW)
    call shardrt_tensor_from_array(t(2), ctx, xy, flags=SHARDRT_COPY_ALLOW)
    call shardrt_tensor_from_array(t(4), ctx, store_u(:, 1:N, 2:2), flags=SHARDRT_COPY_ALLOW)
    call shardrt_tensor_from_array(t(5), ctx, store_xy(:, 1:N, 2:3), flags=SHARDRT_COPY_ALLOW)
    call shardrt_tensor_from_array(t(7), ctx, fx, flags=SHARDRT_COPY_ALLOW)
    call shardrt_tensor_from_array(t(8), ctx, xy_first, order=[3, 2, 1], flags=SHARDRT_COPY_ALLOW)
    do run = 1, 3
      call shardrt_tensor_from_array(t(3 * run), ctx, out(:, :, :, run), flags=SHARDRT_COPY_ALLOW)
      do k = 3 * run - 2, 3 * run
        call shardrt_sharded_create(s(k), mesh, t(k), 3, &
                                    [1_int64, int(N * ranks, int64), merge(2_int64, 1_int64, k == 3 * run - 1)], off)
      end do
      call shardrt_model_set_input(model, "fx", s(3 * run - 2))
      call shardrt_model_set_input(model, "embedding", s(3 * run - 1))
      call shardrt_model_forward(model, s(3 * run), 0)
    end do
    call expect(any(out(:, :, :, 1) /= 0), "the model wrote its output into the Fortran array")
    call expect(all(out(:, :, :, 1) == out(:, :, :, 2)), &
                "a model reads halo-skipping sections exactly as contiguous copies (strides honoured)")
    call expect(all(out(:, :, :, 1) == out(:, :, :, 3)), &
                "... and a channels-first array through order=[3,2,1] too")
    do k = 1, 9
      call shardrt_sharded_destroy(s(k))
      call shardrt_tensor_destroy(t(k))
    end do
    call shardrt_model_destroy(model)
  end subroutine check_strides_by_model

  subroutine check_errors()
    real(real64), target :: a(4, 3)
    type(shardrt_tensor) :: t, never
    character(len=:), allocatable :: msg
    integer :: st
    a = 0
    call shardrt_tensor_destroy(never, stat=st)
    call shardrt_last_error(msg)
    call expect(st == SHARDRT_ERR_INVALID_HANDLE .and. len(msg) > 0, &
                "the null handle -> SHARDRT_ERR_INVALID_HANDLE: " // msg)
    call expect(shardrt_status_name(st) == "SHARDRT_ERR_INVALID_HANDLE", "shardrt_status_name names it")
    call shardrt_tensor_from_array(t, ctx, a, order=[1, 1], stat=st)
    call shardrt_last_error(msg)
    call expect(st == SHARDRT_ERR_VALUE .and. index(msg, "permutation") > 0, "order=[1,1] -> SHARDRT_ERR_VALUE: " // msg)
    call shardrt_tensor_from_array(t, ctx, a(4:1:-1, :), stat=st)
    call shardrt_last_error(msg)
    call expect(st == SHARDRT_ERR_SHAPE, "a reversed section -> SHARDRT_ERR_SHAPE: " // msg)
    call shardrt_tensor_from_array(t, ctx, a, device=12345, stat=st)
    call shardrt_last_error(msg)
    call expect(st /= SHARDRT_OK .and. len(msg) > 0, "a GPU that is not there -> an error: " // msg)
    call shardrt_clear_error()
    call expect(shardrt_last_status() == SHARDRT_OK, "shardrt_clear_error forgets it")
  end subroutine check_errors

end program test_fortran_module
