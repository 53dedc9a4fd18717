#!/usr/bin/env bash
# Installs the build into a scratch DESTDIR, then builds programs against the INSTALLED library from outside the
# source tree, the way simulation codes do, and runs them:
#   pkgconfig  the examples (examples/Makefile: C, C++, Fortran, PETSc) through `pkg-config shardrt` and
#              `shardrt-fortran`, each run once on 2 ranks (the C++ one checks its output against PhysicsNeMo's)
#   cmake      the examples through find_package(ShardRT) (examples/CMakeLists.txt), then their ctest entries:
#              every example under mpiexec -n 1..4 with its parity check
#   meson      tests/install/meson: dependency('shardrt') found installed, and the same project with ShardRT as a
#              subproject (configured from the source tree: the subproject's build is the main build's, so only
#              its configuration is checked here)
#   prefix     the C and Fortran examples built through pkg-config against the fresh prefix, then run with no
#              environment at all but PATH (env -i; OpenMPI finds its own helper programs through it): on one rank
#              as plain programs, on two under mpiexec with only OpenMPI's run-as-root permission added. The loader
#              must find libshardrt and libshardrt_fortran in the prefix (RUNPATH: the .pc files' rpath, and
#              $ORIGIN in libshardrt_fortran.so); the soname is libshardrt.so.0 and shardrt.pc requires MPI's C
#              library only.
# No consumer gets LD_LIBRARY_PATH: the scratch prefix is not on the loader's path, so every program finds the
# installed libraries through its runpath, as a program built against any prefix must.
# Usage: check-install.sh <build dir> <source dir> <pkgconfig|cmake|meson|prefix>
set -euo pipefail
build="$1"
src="$2"
kind="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Out of the build dir: ctest starts this in it, and a `meson setup` of another project run from inside a meson build
# dir deleted that build's shardrt.mod (which a later `meson install --no-rebuild` needs).
cd "$work"
dest="$work/dest"
source "$src/tools/env.sh"
export OMP_NUM_THREADS=1
meson install -C "$build" --destdir "$dest" --quiet --no-rebuild
libshardrt="$(find "$dest" -name 'libshardrt.so' | head -n 1)"
libdir="$(dirname "$libshardrt")"
installed_prefix="$(meson introspect "$build" --buildoptions | python3 -c \
  'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')"
# The .pc files are relocatable (prefix=${pcfiledir}/...): found where the install was staged, without edits.
grep -q '^prefix=${pcfiledir}' "$libdir/pkgconfig/shardrt.pc" ||
  { echo "check-install: shardrt.pc is not relocatable:"; cat "$libdir/pkgconfig/shardrt.pc"; exit 1; }
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# A library built with -Db_sanitize (tools/test --sanitize) needs its sanitizer runtimes loaded first, which only a
# program linked with the same -fsanitize gets: the consumers are built with it then, like any sanitized code base.
consumer_flags=""
if readelf -d "$libshardrt" | grep -q 'NEEDED.*libasan'; then
  consumer_flags="-fsanitize=address,undefined -fno-sanitize-recover=all"
fi
mpi_run() { timeout -k 5 60 mpiexec --oversubscribe --bind-to none "$@" </dev/null; }

case "$kind" in
pkgconfig)
  mkdir -p "$work/examples"
  make -s -C "$src/examples" O="$work/examples" OPT="-O0 $consumer_flags" -j2  # -O0: the time is in libshardrt
  # One run each (the cmake check runs them on 1..4 ranks).
  g="$src/tests/data/golden"
  mpi_run -n 2 "$work/examples/sharded_inference" "$g/flare_irregular.config.json" "$g/flare_irregular.mdlus" \
    "$g/flare_irregular.inputs.safetensors" "$g/flare_irregular.safetensors"
  for p in "$work"/examples/*; do
    case "$(basename "$p")" in
    sharded_inference | *.mod) ;;
    heat_*) mpi_run -n 2 "$p" 12 1 ;;  # 12 training pairs, 1 inference jump
    *) [ -x "$p" ] && mpi_run -n 2 "$p" ;;
    esac
  done
  ;;
cmake)
  cmake -S "$src/examples" -B "$work/examples" -G Ninja -DCMAKE_PREFIX_PATH="$dest$installed_prefix" \
    -DCMAKE_BUILD_TYPE= -DSHARDRT_EXAMPLE_DATA="$src/tests/data/golden" -DCMAKE_C_FLAGS="$consumer_flags" \
    -DCMAKE_CXX_FLAGS="$consumer_flags" -DCMAKE_Fortran_FLAGS="$consumer_flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$consumer_flags" >"$work/cmake.log" ||
    { cat "$work/cmake.log"; exit 1; }
  cmake --build "$work/examples" -j2
  ctest --test-dir "$work/examples" --output-on-failure -j2
  ;;
meson)
  cp -r "$src/tests/install/meson" "$work/consumer"
  meson setup "$work/consumer/build" "$work/consumer" ${consumer_flags:+-Db_sanitize=address,undefined} \
    >"$work/setup.log" || { cat "$work/setup.log"; exit 1; }
  meson compile -C "$work/consumer/build" -j2 >/dev/null
  mpi_run -n 2 "$work/consumer/build/consumer_c"
  # As a subproject: dependency('shardrt') must come from ShardRT's own meson.override_dependency.
  mkdir -p "$work/consumer/subprojects"
  ln -s "$(cd "$src" && pwd)" "$work/consumer/subprojects/shardrt"
  meson setup "$work/consumer/build-sub" "$work/consumer" --wrap-mode=forcefallback -Dshardrt:tests=false \
    -Dshardrt:cuda=disabled >"$work/sub.log" || { cat "$work/sub.log"; exit 1; }
  grep -q "Dependency shardrt found: YES .* (overridden)" "$work/sub.log" ||
    { cat "$work/sub.log"; echo "check-install: the subproject did not provide dependency('shardrt')"; exit 1; }
  ;;
prefix)
  # libshardrt_fortran.so finds libshardrt.so by itself (a program linking only the Fortran library, or linked with
  # --as-needed, has no rpath to lend it).
  readelf -d "$libdir/libshardrt_fortran.so" | grep -q 'RUNPATH.*\[\$ORIGIN\]' ||
    { echo "check-install: libshardrt_fortran.so has no \$ORIGIN runpath"; readelf -d "$libdir/libshardrt_fortran.so"; exit 1; }
  # A versioned soname, and MPI's C library as the only MPI of shardrt.pc (not its C++ bindings).
  readelf -d "$libshardrt" | grep -q 'SONAME.*\[libshardrt\.so\.0\]' ||
    { echo "check-install: libshardrt.so's soname is not libshardrt.so.0"; readelf -d "$libshardrt"; exit 1; }
  if ! grep -q '^Requires: mpi-c$' "$libdir/pkgconfig/shardrt.pc" || grep -q 'mpi-cxx\|ompi-cxx' "$libdir/pkgconfig/shardrt.pc"; then
    echo "check-install: shardrt.pc must require MPI's C library (mpi-c) only:"; cat "$libdir/pkgconfig/shardrt.pc"
    exit 1
  fi
  mkdir -p "$work/prefix"
  # --as-needed: heat_blocks calls the Fortran module only, so it does not link libshardrt.so itself, and the
  # loader must find that through libshardrt_fortran.so's own runpath.
  make -s -C "$src/examples" O="$work/prefix" OPT="-O0 -Wl,--as-needed $consumer_flags" "$work/prefix/heat_insitu" \
    "$work/prefix/heat_blocks"
  for p in heat_insitu heat_blocks; do
    # Each ShardRT library the program loads comes from the scratch prefix.
    resolved="$(env -i LD_TRACE_LOADED_OBJECTS=1 "$work/prefix/$p" | grep 'libshardrt')"
    echo "$resolved"
    if echo "$resolved" | grep -v -q "=> $dest/"; then
      echo "check-install: $p loads a ShardRT library from outside the prefix $dest"; exit 1
    fi
    # (A sanitized build's runtime options, when the suite set them, are the only other variables let through.)
    bare=(env -i PATH=/usr/bin:/bin ${ASAN_OPTIONS:+"ASAN_OPTIONS=$ASAN_OPTIONS"}
          ${LSAN_OPTIONS:+"LSAN_OPTIONS=$LSAN_OPTIONS"} ${UBSAN_OPTIONS:+"UBSAN_OPTIONS=$UBSAN_OPTIONS"})
    timeout -k 5 60 "${bare[@]}" "$work/prefix/$p" 6 1 </dev/null | tail -n 1
    timeout -k 5 60 "${bare[@]}" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpiexec -n 2 --oversubscribe --bind-to none "$work/prefix/$p" 6 1 </dev/null | tail -n 1
  done
  ;;
*)
  echo "check-install.sh: unknown kind '$kind' (pkgconfig, cmake, meson or prefix)" >&2
  exit 2
  ;;
esac
echo "check-install: $kind consumers built against the installed library and ran"
