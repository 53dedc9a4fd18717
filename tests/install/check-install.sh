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
# Usage: check-install.sh <build dir> <source dir> <pkgconfig|cmake|meson>
set -euo pipefail
build="$1"
src="$2"
kind="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dest="$work/dest"
source "$src/tools/env.sh"
export OMP_NUM_THREADS=1
meson install -C "$build" --destdir "$dest" --quiet --no-rebuild
libshardrt="$(find "$dest" -name 'libshardrt.so' | head -n 1)"
libdir="$(dirname "$libshardrt")"
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The scratch install is the install moved to $dest: its own .pc files are pointed there (a sysroot would move
# MPI's paths as well).
installed_prefix="$(sed -n 's/^prefix=//p' "$libdir/pkgconfig/shardrt.pc")"
sed -i "s|^prefix=.*|prefix=$dest$installed_prefix|" "$libdir"/pkgconfig/shardrt*.pc
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
*)
  echo "check-install.sh: unknown kind '$kind' (pkgconfig, cmake or meson)" >&2
  exit 2
  ;;
esac
echo "check-install: $kind consumers built against the installed library and ran"
