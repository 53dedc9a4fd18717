#!/usr/bin/env python3
"""Writes capi/shardrt.f90, ShardRT's Fortran module, from capi/shardrt.h.

    python3 capi/gen_fortran.py [--check]      (--check: fail if the checked-in module is out of date)

Why generated: the module is a thin iso_c_binding layer, and most of it follows mechanically from the header --
the status and enum values, one bind(C) interface per C function, and a Fortran wrapper per function that turns
Fortran strings into NUL-terminated ones and adds the optional `stat=` argument. Reading the header (instead of
repeating its prototypes here) keeps the two from drifting: a new C function appears in Fortran on the next run,
and a C type this script does not know stops it with the function's name. The array overloads (real32/real64,
rank 1..5) are written from one template for the same reason.

The header is parsed with regular expressions, which is enough because shardrt.h keeps to a plain style: one
prototype per statement, `shardrt_status name(args);`, handles as `typedef struct x { uint64_t id; } x;`.
"""
import argparse
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
HEADER = HERE / "shardrt.h"
OUTPUT = HERE / "shardrt.f90"

# Pointer arguments the header documents as "may be NULL" (function.argument): optional in Fortran (an absent
# optional argument reaches C as NULL). Every other pointer argument is required.
NULLABLE = {
    "shardrt_tensor_wrap.strides", "shardrt_model_create.weights", "shardrt_mesh_comm_counts.kind",
    "shardrt_checkpoint_load.step", "shardrt_last_error_copy.buf",
    "shardrt_mesh_info.ddp_size", "shardrt_mesh_info.domain_size", "shardrt_mesh_info.ddp_index",
    "shardrt_mesh_info.domain_index", "shardrt_tensor_shape.shape", "shardrt_sharded_global_shape.shape",
}
# Pointer arguments that are arrays (of `ndim` or `cap` entries); every other pointer to a number is one value.
ARRAYS = {"shape", "strides", "global_shape", "offsets"}
# C functions that Fortran does not get as such: the MPI_Comm variants (Fortran passes MPI_Fint to the *_f ones,
# which take over the plain names) and the message calls that the hand-written shardrt_last_error replaces.
SKIP = {"shardrt_last_error", "shardrt_status_name"}
# Functions that return a status as their value rather than reporting one: Fortran functions of the same name.
QUERIES = {"shardrt_last_status"}
KINDS = {"real32": ("real(real32)", "SHARDRT_F32"), "real64": ("real(real64)", "SHARDRT_F64")}
MAX_RANK = 5


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse_header(text):
    code = strip_comments(text)
    handles = re.findall(r"typedef\s+struct\s+(\w+)\s*\{\s*uint64_t\s+id\s*;\s*\}\s*\1\s*;", code)
    enums = {}
    for name, body in re.findall(r"typedef\s+enum\s+(\w+)\s*\{(.*?)\}\s*\w+\s*;", code, flags=re.S):
        values, nxt = [], 0
        for item in filter(None, (s.strip() for s in body.split(","))):
            m = re.fullmatch(r"(\w+)(?:\s*=\s*(-?\d+))?", item)
            if not m:
                sys.exit(f"gen_fortran.py: cannot read enum {name} item '{item}'")
            nxt = int(m.group(2)) if m.group(2) is not None else nxt
            values.append((m.group(1), nxt))
            nxt += 1
        enums[name] = values
    defines = [(n, int(v)) for n, v in re.findall(r"#define\s+(SHARDRT_\w+)\s+\(?(-?\d+)\)?", text)]
    protos = []
    for ret, name, args in re.findall(r"([\w\s\*]+?)\s*\b(shardrt_\w+)\s*\(([^)]*)\)\s*;", code):
        ret = " ".join(ret.split())
        arglist = [] if args.strip() in ("", "void") else [a.strip() for a in args.split(",")]
        protos.append((ret, name, arglist))
    return handles, enums, defines, protos


class Arg:
    """One C argument and how it is declared in the bind(C) interface and in the Fortran wrapper."""

    def __init__(self, func, decl, handles, enums):
        m = re.fullmatch(r"(const\s+)?([\w]+)\s*(\*?)\s*(\w+)", " ".join(decl.split()))
        if not m:
            sys.exit(f"gen_fortran.py: {func}: cannot read the argument '{decl}'")
        const, ctype, star, self.name = bool(m.group(1)), m.group(2), m.group(3) == "*", m.group(4)
        self.optional = star and f"{func}.{self.name}" in NULLABLE
        self.is_string = False
        intent = "in" if (const or not star) else "out"
        value = "" if star else ", value"
        opt = ", optional" if self.optional else ""
        if ctype in handles:
            base = f"type({ctype})"
        elif ctype in enums or ctype == "int" or ctype == "MPI_Fint":
            base = "integer(c_int)"
        elif ctype in ("int64_t", "uint64_t"):
            base = "integer(c_int64_t)"  # uint64_t seeds: the same 64 bits
        elif ctype == "size_t":
            base = "integer(c_size_t)"
        elif ctype == "double":
            base = "real(c_double)"
        elif ctype == "void" and star:
            self.c_decl = f"type(c_ptr), value :: {self.name}"
            self.f_decl = f"type(c_ptr), intent(in) :: {self.name}"
            return
        elif ctype == "char" and star:
            self.is_string = const
            self.c_decl = f"character(kind=c_char), intent({intent}){opt} :: {self.name}(*)"
            self.f_decl = (f"character(len=*), intent(in){opt} :: {self.name}" if const else self.c_decl)
            return
        else:
            sys.exit(f"gen_fortran.py: {func}: no Fortran type for the C type '{decl}'; teach gen_fortran.py")
        dims = "(*)" if (star and self.name in ARRAYS) else ""
        fdims = "(:)" if dims else ""
        self.c_decl = f"{base}{value}, intent({intent}){opt} :: {self.name}{dims}"
        self.f_decl = f"{base}, intent({intent}){opt} :: {self.name}{fdims}"

    def actual(self):
        """The expression the wrapper passes to the bind(C) interface."""
        return f"c_{self.name}" if self.is_string else self.name


def fortran_name(c_name):
    # The Fortran communicator variants take over the plain names: Fortran has no MPI_Comm.
    return c_name[:-2] if c_name.endswith("_f") else c_name


def wrap_lines(line, indent):
    """Splits a long Fortran statement at commas with '&' continuations (free form allows 132 columns)."""
    out, cur = [], line
    while len(cur) > 110:
        cut = cur.rfind(", ", 0, 110)
        if cut < 0:
            break
        out.append(cur[: cut + 1] + " &")
        cur = " " * (indent + 4) + cur[cut + 2:]
    out.append(cur)
    return out


def emit_function(ret, name, args, handles, enums):
    """The bind(C) interface (private, c_<name>) and the public wrapper with `stat=`."""
    parsed = [Arg(name, a, handles, enums) for a in args]
    fname = fortran_name(name)
    names = ", ".join(a.name for a in parsed)
    iface = []
    if ret == "shardrt_status":
        head = f"integer(c_int) function c_{name}({names}) bind(C, name=\"{name}\")"
        tail = "end function"
    elif ret == "void":
        head = f"subroutine c_{name}({names}) bind(C, name=\"{name}\")"
        tail = "end subroutine"
    elif ret == "size_t":
        head = f"integer(c_size_t) function c_{name}({names}) bind(C, name=\"{name}\")"
        tail = "end function"
    else:
        sys.exit(f"gen_fortran.py: {name}: no Fortran form for the return type '{ret}'; teach gen_fortran.py")
    iface += wrap_lines("    " + head, 4)
    iface.append("      import")
    iface += ["      " + a.c_decl for a in parsed]
    iface.append("    " + tail)

    if name in QUERIES:
        return iface, [f"  integer function {fname}()", f"    {fname} = int(c_{name}())", f"  end function {fname}"], fname
    if ret == "void":
        sig = ", ".join(a.name for a in parsed)
        body = [f"  subroutine {fname}({sig})"] + ["    " + a.f_decl for a in parsed]
        if name == "shardrt_clear_error":
            body.append("    fortran_message_is_last = .false.")
        body += [f"    call c_{name}({sig})", f"  end subroutine {fname}"]
        return iface, body, fname
    if ret != "shardrt_status":
        return iface, [], None  # used inside the module only (shardrt_last_error_copy)
    sig = ", ".join([a.name for a in parsed] + ["stat"])
    body = wrap_lines(f"  subroutine {fname}({sig})", 2)
    body += ["    " + a.f_decl for a in parsed]
    body.append("    integer, intent(out), optional :: stat")
    strings = [a for a in parsed if a.is_string]
    for a in strings:
        body.append(f"    character(kind=c_char, len=:), allocatable :: c_{a.name}")
    body.append("    integer(c_int) :: status")
    for a in strings:
        if a.optional:  # an unallocated actual argument reaches C as NULL
            body.append(f"    if (present({a.name})) c_{a.name} = trim({a.name}) // c_null_char")
        else:
            body.append(f"    c_{a.name} = trim({a.name}) // c_null_char")
    call = ", ".join(a.actual() for a in parsed)
    body += wrap_lines(f"    status = c_{name}({call})", 4)
    body.append(f"    call report(status, \"{fname}\", stat)")
    body.append(f"  end subroutine {fname}")
    return iface, body, fname


ARRAY_TEMPLATE = """\
  ! Wraps the Fortran array `a` zero-copy as a tensor of the same shape, in the same dimension order (never
  ! reversed): element a(i1, i2, ...) is element (i1-1, i2-1, ...) of the tensor. Its strides are read from the
  ! array itself, so a column-major array, a non-contiguous section (a halo skipped: a(2:n-1, 2:m-1)) or a
  ! component of an array of derived types is wrapped in place. `order` (a permutation of 1..rank) presents the
  ! array's dims in another order, still without a copy: tensor dim k is array dim order(k). For example an
  ! array fx(c, i, j, s) (Fortran's natural channels-first) wrapped with order=[4, 3, 2, 1] is the row-major
  ! tensor (s, j, i, c) that a point model takes as (B, points, C). The actual argument must have the TARGET
  ! (or POINTER) attribute and stay allocated while the tensor is used: ShardRT reads and writes it later.
  subroutine {name}(t, ctx, a, order, flags, device, stat)
    type(shardrt_tensor), intent(out) :: t
    type(shardrt_context), intent(in) :: ctx
    {ftype}, target :: a({colons})
    integer, intent(in), optional :: order({rank})
    integer, intent(in), optional :: flags, device
    integer, intent(out), optional :: stat
    integer(c_int64_t) :: dims({rank}), strides({rank})
    type(c_ptr) :: first
    dims = shape(a, kind=c_int64_t)
    if (size(a, kind=c_int64_t) == 0) then
      first = c_null_ptr  ! a zero-size subdomain has no element to point at
      strides = column_major_strides(dims)
    else
      first = c_loc(a({ones}))
{stride_lines}
    end if
    call wrap(t, ctx, first, {dtype}, dims, strides, order, flags, device, "{name}", stat)
  end subroutine {name}
"""


def emit_array_overloads():
    specifics, bodies = [], []
    for kind, (ftype, dtype) in KINDS.items():
        for rank in range(1, MAX_RANK + 1):
            name = f"shardrt_tensor_from_{kind}_{rank}d"
            specifics.append(name)
            ones = ", ".join(["1"] * rank)
            lines = []
            for k in range(rank):
                # The address of the element one step along dim k, where that dim has a second element.
                idx = ", ".join("min(2, size(a, {0}))".format(k + 1) if j == k else "1" for j in range(rank))
                lines.append(f"      strides({k + 1}) = element_distance(first, c_loc(a({idx})), "
                             f"c_sizeof(a({ones})), dims, {k + 1})")
            bodies.append(ARRAY_TEMPLATE.format(name=name, ftype=ftype, colons=", ".join([":"] * rank), rank=rank,
                                                ones=ones, stride_lines="\n".join(lines), dtype=dtype))
    return specifics, bodies


PRELUDE = """\
! GENERATED by capi/gen_fortran.py from capi/shardrt.h -- do not edit; edit the generator and rerun it.
!
! ShardRT's Fortran module: the C API of capi/shardrt.h through iso_c_binding, for simulation codes that train
! and run models in situ on their own domain decomposition.
!
!   use shardrt
!   type(shardrt_context) :: ctx
!   call shardrt_context_create(ctx, MPI_COMM_WORLD, SHARDRT_AGREE_ERRORS)     ! mpi_f08: MPI_COMM_WORLD%MPI_VAL
!   call shardrt_tensor_from_array(t, ctx, u(2:nx-1, 2:ny-1, :), stat=ierr)   ! zero-copy, halo skipped
!
! Every subroutine of the C API has the same name and arguments here, plus an optional `stat`: with it, the
! status (SHARDRT_OK = 0 or an error code) is returned and the program goes on; without it, an error prints its
! message and stops the program (ERROR STOP), as a Fortran I/O statement without IOSTAT= does. Nothing here ever
! calls exit() on a rank behind the code's back. `call shardrt_last_error(msg)` gives the message of the last
! failed call of this thread. MPI communicators are Fortran integers (MPI_Fint; mpi_f08: comm%MPI_VAL). Shapes,
! strides and offsets keep Fortran's dimension order (nothing is reversed); offsets count elements before this
! rank's box (0-based). Handles start as the null handle (id 0).
module shardrt
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: real32, real64, error_unit
  implicit none
  private
"""


def generate(header_text):
    handles, enums, defines, protos = parse_header(header_text)
    if not handles or not protos:
        sys.exit("gen_fortran.py: no handles or no functions found in shardrt.h")
    out = [PRELUDE]
    out.append("  ! ---- handles: the C structs {uint64_t id}, passed by value like them ----")
    for h in handles:
        out += [f"  type, bind(C), public :: {h}", "    integer(c_int64_t) :: id = 0", f"  end type {h}"]
    out.append("")
    out.append("  ! ---- status, dtype and layout values, and the header's #define constants ----")
    for ename, values in enums.items():
        for n, v in values:
            out.append(f"  integer(c_int), parameter, public :: {n} = {v}  ! {ename}")
    for n, v in defines:
        out.append(f"  integer(c_int), parameter, public :: {n} = {v}")
    out.append("")

    interfaces, wrappers, publics = [], [], []
    c_names = {name for _, name, _ in protos}
    for ret, name, args in protos:
        if name in SKIP or "MPI_Comm" in " ".join(args) and f"{name}_f" in c_names:
            continue
        if "MPI_Comm" in " ".join(args):
            sys.exit(f"gen_fortran.py: {name} takes an MPI_Comm and has no _f variant for Fortran")
        iface, body, fname = emit_function(ret, name, args, handles, enums)
        interfaces += iface
        if fname:
            wrappers += body + [""]
            publics.append(fname)

    specifics, array_bodies = emit_array_overloads()
    out.append("  public :: " + ", ".join(["shardrt_last_error", "shardrt_status_name", "shardrt_tensor_from_array"]))
    for i in range(0, len(publics), 4):
        out.append("  public :: " + ", ".join(publics[i:i + 4]))
    out.append("")
    out.append("  ! One generic name for every real kind and rank (1..5) of array.")
    out.append("  interface shardrt_tensor_from_array")
    for i in range(0, len(specifics), 3):
        out.append("    module procedure " + ", ".join(specifics[i:i + 3]))
    out.append("  end interface shardrt_tensor_from_array")
    out.append("")
    out.append("  interface")
    out += interfaces
    out.append("  end interface")
    out.append("")
    out.append("  ! The message of a failure found on the Fortran side (no C call was made), and whether it is the latest.")
    out.append("  character(len=:), allocatable :: fortran_message")
    out.append("  logical :: fortran_message_is_last = .false.")
    out.append("")
    out.append("contains")
    out.append("")
    out.append(HELPERS)
    out += wrappers
    out += array_bodies
    out.append("end module shardrt")
    return "\n".join(out) + "\n"


HELPERS = """\
  ! The status of a call: returned in `stat` when the caller passed one, otherwise an error stops the program with
  ! the message (never silently ignored).
  subroutine report(status, where, stat)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: where
    integer, intent(out), optional :: stat
    character(len=:), allocatable :: msg
    if (status /= SHARDRT_OK) fortran_message_is_last = .false.  ! C now holds the latest message
    if (present(stat)) then
      stat = int(status)
      return
    end if
    if (status /= SHARDRT_OK) then
      call shardrt_last_error(msg)
      write (error_unit, '(a)') where // ": " // msg // " (pass stat= to handle errors in the code)"
      error stop 1
    end if
  end subroutine report

  ! Sets the message of an error found before calling C (a Fortran argument ShardRT cannot take).
  subroutine fortran_error(status, message, where, stat)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: message, where
    integer, intent(out), optional :: stat
    fortran_message = where // ": " // message
    fortran_message_is_last = .true.
    if (present(stat)) then
      stat = int(status)
      return
    end if
    write (error_unit, '(a)') fortran_message // " (pass stat= to handle errors in the code)"
    error stop 1
  end subroutine fortran_error

  ! The message of this thread's last failed call, as an allocatable string of its exact length ("" when none).
  subroutine shardrt_last_error(msg)
    character(len=:), allocatable, intent(out) :: msg
    character(kind=c_char), allocatable :: buf(:)
    integer(c_size_t) :: n
    integer :: i
    if (fortran_message_is_last) then
      msg = fortran_message
      return
    end if
    n = c_shardrt_last_error_copy(cap=0_c_size_t)  ! buf absent (NULL): the length only
    allocate (buf(n + 1))
    n = c_shardrt_last_error_copy(buf, n + 1)
    allocate (character(len=n) :: msg)
    do i = 1, int(n)
      msg(i:i) = buf(i)
    end do
  end subroutine shardrt_last_error

  ! The name of a status ("SHARDRT_ERR_SHAPE").
  function shardrt_status_name(status) result(name)
    integer, intent(in) :: status
    character(len=:), allocatable :: name
    interface
      type(c_ptr) function c_status_name(s) bind(C, name="shardrt_status_name")
        import
        integer(c_int), value :: s
      end function c_status_name
      integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
        import
        type(c_ptr), value :: s
      end function c_strlen
    end interface
    type(c_ptr) :: p
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    p = c_status_name(int(status, c_int))
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(len=n) :: name)
    do i = 1, n
      name(i:i) = chars(i)
    end do
  end function shardrt_status_name

  ! Fortran's own layout: the first dim is contiguous.
  pure function column_major_strides(dims) result(strides)
    integer(c_int64_t), intent(in) :: dims(:)
    integer(c_int64_t) :: strides(size(dims))
    integer :: k
    strides(1) = 1
    do k = 2, size(dims)
      strides(k) = strides(k - 1) * max(dims(k - 1), 1_c_int64_t)
    end do
  end function column_major_strides

  ! The stride of dim k in elements: the distance from the first element to the next one along k. A dim of extent
  ! 1 has no next element; it gets its column-major stride (any value is right for it, and C wants one >= 0).
  function element_distance(first, next, elem_bytes, dims, k) result(stride)
    type(c_ptr), intent(in) :: first, next
    integer(c_size_t), intent(in) :: elem_bytes
    integer(c_int64_t), intent(in) :: dims(:)
    integer, intent(in) :: k
    integer(c_int64_t) :: stride, s(size(dims))
    integer(c_intptr_t) :: a, b
    if (dims(k) <= 1) then
      s = column_major_strides(dims)
      stride = s(k)
      return
    end if
    a = transfer(first, a)
    b = transfer(next, b)
    stride = int((b - a) / int(elem_bytes, c_intptr_t), c_int64_t)
  end function element_distance

  ! The common end of the array overloads: one shardrt_tensor_wrap with the array's own strides.
  subroutine wrap(t, ctx, first, dtype, dims, strides, order, flags, device, where, stat)
    type(shardrt_tensor), intent(out) :: t
    type(shardrt_context), intent(in) :: ctx
    type(c_ptr), intent(in) :: first
    integer(c_int), intent(in) :: dtype
    integer(c_int64_t), intent(in) :: dims(:), strides(:)
    integer, intent(in), optional :: order(:)
    integer, intent(in), optional :: flags, device
    character(len=*), intent(in) :: where
    integer, intent(out), optional :: stat
    integer(c_int) :: c_flags, c_device
    integer(c_int) :: status
    integer(c_int64_t) :: t_dims(size(dims)), t_strides(size(dims))
    integer :: k
    character(len=64) :: text
    t_dims = dims
    t_strides = strides
    if (present(order)) then
      do k = 1, size(dims)
        if (count(order == k) /= 1) then
          write (text, '(*(i0, :, ", "))') order
          call fortran_error(SHARDRT_ERR_VALUE, "order=[" // trim(text) // "] is not a permutation of the " // &
                             "array's dims 1.." // achar(48 + size(dims)), where, stat)
          return
        end if
      end do
      t_dims = dims(order)
      t_strides = strides(order)
    end if
    if (any(strides < 0)) then
      ! A reversed section (a(n:1:-1)) would need a negative stride, which C refuses; say so in Fortran terms.
      call fortran_error(SHARDRT_ERR_SHAPE, "the array runs backwards along a dim (a reversed section such as " // &
                         "a(n:1:-1)); pass a forward section or a copy", where, stat)
      return
    end if
    c_flags = SHARDRT_COPY_DEFAULT
    if (present(flags)) c_flags = int(flags, c_int)
    c_device = SHARDRT_DEVICE_AUTO
    if (present(device)) c_device = int(device, c_int)
    status = c_shardrt_tensor_wrap(t, ctx, first, dtype, int(size(dims), c_int), t_dims, t_strides, &
                                   SHARDRT_LAYOUT_COL_MAJOR, c_device, c_flags)
    call report(status, where, stat)
  end subroutine wrap
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when capi/shardrt.f90 differs from what it would be")
    ap.add_argument("--header", default=str(HEADER))
    ap.add_argument("--output", default=str(OUTPUT))
    a = ap.parse_args()
    text = generate(pathlib.Path(a.header).read_text())
    out = pathlib.Path(a.output)
    if a.check:
        if not out.exists() or out.read_text() != text:
            sys.exit(f"gen_fortran.py: {out} is out of date with {a.header}: run python3 capi/gen_fortran.py")
        return
    out.write_text(text)


if __name__ == "__main__":
    main()
