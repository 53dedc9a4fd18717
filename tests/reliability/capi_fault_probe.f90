! The Fortran client of capi_faults.sh: the same program as capi_fault_probe.c (read its header for the modes, the
! faults and the result files), written against the Fortran module (capi/shardrt.f90) with the solver's arrays in
! Fortran order, channels first (c, point, sample), presented to the model by order=[3, 2, 1]. The faults are sprung
! by capi_fault_inject.c, called through bind(C).
!   mpiexec -n 3 capi_fault_probe_f <error|kill|stop> <train_step|forward|save> <0|1> DIR
!   capi_fault_probe_f verify DIR
program capi_fault_probe_f
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: real32, real64, int64, output_unit
  use mpi_f08
  use shardrt
  implicit none

  interface
    type(c_ptr) function fault_alloc(bytes) bind(C, name="fault_alloc")
      import :: c_ptr, c_size_t
      integer(c_size_t), value :: bytes
    end function fault_alloc
    integer(c_int) function fault_arm_memory(p, bytes, action) bind(C, name="fault_arm_memory")
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: p
      integer(c_size_t), value :: bytes
      integer(c_int), value :: action
    end function fault_arm_memory
    integer(c_int) function fault_arm_file_size(bytes, action) bind(C, name="fault_arm_file_size")
      import :: c_long, c_int
      integer(c_long), value :: bytes
      integer(c_int), value :: action
    end function fault_arm_file_size
    integer(c_int) function fault_disarm_file_size() bind(C, name="fault_disarm_file_size")
      import :: c_int
    end function fault_disarm_file_size
    real(c_double) function fault_now() bind(C, name="fault_now")
      import :: c_double
    end function fault_now
    integer(c_int) function c_rename(from, to) bind(C, name="rename")
      import :: c_char, c_int
      character(kind=c_char), intent(in) :: from(*), to(*)
    end function c_rename
    integer(c_int) function c_usleep(us) bind(C, name="usleep")
      import :: c_int
      integer(c_int), value :: us
    end function c_usleep
  end interface

  integer, parameter :: POINTS = 10, VICTIM_RANK = 1, FAULT_ERROR = 0, FAULT_KILL = 1, FAULT_STOP = 2
  character(len=*), parameter :: CONFIG = '{"functional_dim": 3, "out_dim": 2, "embedding_dim": 2, ' // &
    '"n_layers": 2, "n_hidden": 16, "n_head": 2, "mlp_ratio": 1, "slice_num": 4}'
  character(len=*), parameter :: OPTIMIZER = '{"optimizer": {"algorithm": "adamw", "lr": 0.001, "mode": "mesh"}}'

  ! One rank's piece of a field: (channels, POINTS, 1) in Fortran order, in pages of its own.
  type :: field
    real(real64), pointer :: a(:, :, :) => null()
    real(real32), pointer :: a32(:, :, :) => null()
    type(c_ptr) :: mem = c_null_ptr
    integer(c_size_t) :: bytes = 0
    type(shardrt_tensor) :: t
    type(shardrt_sharded) :: s
  end type field

  integer :: rank, ranks, ierr, fault, agree, status
  character(len=4096) :: arg, dir, call_name, ckpt
  type(shardrt_context) :: ctx
  type(shardrt_mesh) :: mesh
  type(shardrt_model) :: model
  type(shardrt_optimizer) :: opt
  type(field) :: fx, emb, out, target, bad
  real(c_double) :: loss, t0, seconds
  logical :: is_victim

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, ranks)
  call get_command_argument(1, arg)
  if (trim(arg) == "verify") then
    call get_command_argument(2, dir)
    status = verify_checkpoint(trim(dir))
    call MPI_Finalize(ierr)
    if (status /= 0) error stop 1
    stop
  end if
  if (command_argument_count() /= 4 .or. ranks /= 3) then
    write (*, '(a)') "usage: mpiexec -n 3 capi_fault_probe_f <error|kill|stop> <train_step|forward|save> <0|1> DIR"
    call MPI_Abort(MPI_COMM_WORLD, 2)
  end if
  fault = FAULT_ERROR
  if (trim(arg) == "kill") fault = FAULT_KILL
  if (trim(arg) == "stop") fault = FAULT_STOP
  call get_command_argument(2, call_name)
  call get_command_argument(3, arg)
  read (arg, *) agree
  call get_command_argument(4, dir)
  ckpt = trim(dir) // "/ckpt"
  is_victim = rank == VICTIM_RANK

  call shardrt_context_create(ctx, MPI_COMM_WORLD%MPI_VAL, merge(SHARDRT_AGREE_ERRORS, 0, agree == 1))
  call shardrt_mesh_create(mesh, ctx, MPI_COMM_WORLD%MPI_VAL, 1, ranks, SHARDRT_DEVICE_CPU)
  call shardrt_model_create(model, mesh, "flare", CONFIG, dtype=SHARDRT_F64, seed=7_int64)
  call make_field(fx, 3, 1.0_real64, .false.)
  call make_field(emb, 2, 0.5_real64, .false.)
  call make_field(out, 2, 0.0_real64, .false.)
  call make_field(target, 2, 0.3_real64, .false.)
  call make_field(bad, merge(3, 2, trim(call_name) == "forward"), 1.0_real64, .true.)
  call shardrt_model_set_input(model, "fx", fx%s)
  call shardrt_model_set_input(model, "embedding", emb%s)

  if (trim(call_name) == "forward") then
    call shardrt_model_forward(model, out%s, 0)  ! a first forward, untouched
  else
    call shardrt_optimizer_create(opt, model, OPTIMIZER)
    call shardrt_train_step(opt, target%s, loss)
  end if
  if (trim(call_name) == "save") then
    call shardrt_checkpoint_save(opt, trim(ckpt))  ! the previous checkpoint: step 1
    call shardrt_model_export(model, trim(dir) // "/ref-1.safetensors")
    call shardrt_train_step(opt, target%s, loss)
    call shardrt_model_export(model, trim(dir) // "/ref-2.safetensors")
  end if

  if (is_victim) then
    ierr = 0
    if (trim(call_name) == "forward") then
      if (fault == FAULT_ERROR) then
        call shardrt_model_set_input(model, "fx", bad%s)
      else
        ierr = fault_arm_memory(fx%mem, fx%bytes, int(fault, c_int))
      end if
    else if (trim(call_name) == "train_step") then
      if (fault /= FAULT_ERROR) ierr = fault_arm_memory(target%mem, target%bytes, int(fault, c_int))
    else
      ierr = fault_arm_file_size(512_c_long, int(fault, c_int))
    end if
    if (ierr /= 0) call MPI_Abort(MPI_COMM_WORLD, 2)
  end if
  call MPI_Barrier(MPI_COMM_WORLD)
  t0 = fault_now()
  if (trim(call_name) == "forward") then
    call shardrt_model_forward(model, out%s, 0, stat=status)
    call_name = "shardrt_model_forward"
  else if (trim(call_name) == "train_step") then
    if (is_victim .and. fault == FAULT_ERROR) then
      call shardrt_train_step(opt, bad%s, loss, stat=status)
    else
      call shardrt_train_step(opt, target%s, loss, stat=status)
    end if
    call_name = "shardrt_train_step"
  else
    call shardrt_checkpoint_save(opt, trim(ckpt), stat=status)
    call_name = "shardrt_checkpoint_save"
  end if
  seconds = fault_now() - t0
  ierr = fault_disarm_file_size()
  call report_and_end(trim(call_name), status, seconds)

contains

  subroutine make_field(f, channels, scale, single)
    type(field), intent(inout) :: f
    integer, intent(in) :: channels
    real(real64), intent(in) :: scale
    logical, intent(in) :: single  ! f32 memory that forbids copies (the error mode's input)
    integer :: i, c
    real(real64) :: v
    f%bytes = int(POINTS * channels, c_size_t) * merge(4_c_size_t, 8_c_size_t, single)
    f%mem = fault_alloc(f%bytes)
    if (single) then
      call c_f_pointer(f%mem, f%a32, [channels, POINTS, 1])
    else
      call c_f_pointer(f%mem, f%a, [channels, POINTS, 1])
    end if
    do i = 1, POINTS
      do c = 1, channels
        v = scale * (real(mod(rank * POINTS * channels + (i - 1) * channels + c - 1, 7), real64) - 3.0_real64) / 3.0_real64
        if (single) then
          f%a32(c, i, 1) = real(v, real32)
        else
          f%a(c, i, 1) = v
        end if
      end do
    end do
    if (single) then
      call shardrt_tensor_from_array(f%t, ctx, f%a32, order=[3, 2, 1], flags=SHARDRT_COPY_FORBID)
    else
      call shardrt_tensor_from_array(f%t, ctx, f%a, order=[3, 2, 1])
    end if
    call shardrt_sharded_create(f%s, mesh, f%t, 3, [1_int64, int(ranks * POINTS, int64), int(channels, int64)], &
                                [0_int64, int(rank * POINTS, int64), 0_int64])
  end subroutine make_field

  ! This rank's result file (written whole, then renamed into place), then, once every live rank has written its
  ! own (at most 20 s), the end of the job.
  subroutine report_and_end(fn, st, secs)
    character(len=*), intent(in) :: fn
    integer, intent(in) :: st
    real(c_double), intent(in) :: secs
    character(len=:), allocatable :: msg, path
    character(len=32) :: rs
    integer :: u, r, waited
    logical :: all_there, there
    msg = ""
    if (st /= SHARDRT_OK) call shardrt_last_error(msg)
    write (rs, '(i0)') rank
    path = trim(dir) // "/rank-" // trim(rs) // ".txt"
    open (newunit=u, file=path // ".tmp", status="replace", action="write")
    write (u, '(5a, f0.3, 2a)') "call=", fn, " status=", shardrt_status_name(st), " seconds=", secs, " message=", msg
    close (u)
    if (c_rename(path // ".tmp" // c_null_char, path // c_null_char) /= 0) call MPI_Abort(MPI_COMM_WORLD, 2)
    write (output_unit, '(a, i0, 5a, f0.3, a)') "capi_fault_probe_f: rank ", rank, ": ", fn, " -> ", &
      shardrt_status_name(st), " after ", secs, " s"
    flush (output_unit)
    do waited = 1, 2000
      all_there = .true.
      do r = 0, 2
        if (r == VICTIM_RANK .and. fault /= FAULT_ERROR) cycle
        write (rs, '(i0)') r
        inquire (file=trim(dir) // "/rank-" // trim(rs) // ".txt", exist=there)
        all_there = all_there .and. there
      end do
      if (all_there) exit
      u = c_usleep(10000_c_int)
    end do
    call MPI_Abort(MPI_COMM_WORLD, 0)
  end subroutine report_and_end

  ! The checkpoint in DIR/ckpt, loaded on one rank: step 1 or 2, every parameter equal to that step's export.
  integer function verify_checkpoint(d) result(rc)
    character(len=*), intent(in) :: d
    type(shardrt_context) :: c1
    type(shardrt_mesh) :: m1
    type(shardrt_model) :: mod1
    type(shardrt_optimizer) :: o1
    integer(int64) :: step
    integer :: st
    character(len=:), allocatable :: msg
    character(len=8) :: ss
    rc = 1
    call shardrt_context_create(c1, MPI_COMM_WORLD%MPI_VAL, 0)
    call shardrt_mesh_create(m1, c1, MPI_COMM_WORLD%MPI_VAL, 1, 1, SHARDRT_DEVICE_CPU)
    call shardrt_model_create(mod1, m1, "flare", CONFIG, dtype=SHARDRT_F64, seed=7_int64)
    call shardrt_optimizer_create(o1, mod1, OPTIMIZER)
    call shardrt_checkpoint_load(o1, d // "/ckpt", step, stat=st)
    if (st /= SHARDRT_OK) then
      call shardrt_last_error(msg)
      write (*, '(2a)') "verify: FAILED: the checkpoint does not load: ", msg
      return
    end if
    call shardrt_model_export(mod1, d // "/check.safetensors")
    write (ss, '(i0)') step
    if ((step /= 1 .and. step /= 2) .or. .not. same_bytes(d // "/check.safetensors", &
                                                          d // "/ref-" // trim(ss) // ".safetensors")) then
      write (*, '(3a)') "verify: FAILED: the checkpoint holds step ", trim(ss), ", not that step's parameters"
      return
    end if
    write (*, '(4a)') "verify: the checkpoint holds step ", trim(ss), &
      merge(" (the previous save, intact)", " (the new save, complete)   ", step == 1), &
      ", every parameter equal to that step's"
    rc = 0
  end function verify_checkpoint

  logical function same_bytes(a, b)
    character(len=*), intent(in) :: a, b
    integer :: ua, ub, na, nb
    character(len=:), allocatable :: ca, cb
    inquire (file=a, size=na)
    inquire (file=b, size=nb)
    same_bytes = na == nb .and. na > 0
    if (.not. same_bytes) return
    allocate (character(len=na) :: ca, cb)
    open (newunit=ua, file=a, access="stream", form="unformatted", action="read")
    open (newunit=ub, file=b, access="stream", form="unformatted", action="read")
    read (ua) ca
    read (ub) cb
    close (ua)
    close (ub)
    same_bytes = ca == cb
  end function same_bytes

end program capi_fault_probe_f
