# Sourced by `tools/test --sanitize` (and by hand before running one test of build-asan by itself): the sanitizer
# runtime options every process of the sanitized suite gets. ctest passes its environment to the shell drivers and
# to tests/mpirun.sh, and OpenMPI's mpiexec gives its own environment to the ranks it starts on this host, so the
# ranks and every tool binary the drivers exec read these too (ranks on other hosts would need
# `mpiexec -x ASAN_OPTIONS -x UBSAN_OPTIONS -x LSAN_OPTIONS -x LD_PRELOAD`).
#
# Reports go to files, $SHARDRT_SANITIZE_LOGS/{asan,ubsan}.<pid>, instead of stderr: several tests run a program that
# must fail (a misspelt config key, a killed rank) and check only that it did, so a report on such a path would be
# one more non-zero exit the test expects. tools/test fails the run when that folder holds any report after ctest.
_sanitize_src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_sanitize_build="${SHARDRT_SANITIZE_BUILD:-$_sanitize_src/../../build-asan}"
export SHARDRT_SANITIZE_LOGS="${SHARDRT_SANITIZE_LOGS:-$_sanitize_build/sanitizer-reports}"
mkdir -p "$SHARDRT_SANITIZE_LOGS"
# keep_modules.c: dlclose does nothing, so OpenMPI's components stay mapped until LeakSanitizer's check at exit and
# their leaks resolve to their mca_*.so (see the file). Built without sanitizers, preloaded into every process.
_keep="$_sanitize_build/sanitize-keep-modules.so"
if [ ! -f "$_keep" ] || [ "$_sanitize_src/keep_modules.c" -nt "$_keep" ]; then
  mkdir -p "$_sanitize_build"
  cc -shared -fPIC -O1 "$_sanitize_src/keep_modules.c" -o "$_keep"
fi
export LD_PRELOAD="$_keep${LD_PRELOAD:+:$LD_PRELOAD}"
# ASan: stop at the first report (its default), leaks checked at exit, static initialisation order and ODR too.
# verify_asan_link_order=0: the preloaded keep_modules comes before the ASan runtime in the library list; it
# defines dlclose only, so every allocation function still resolves to ASan's. allocator_may_return_null=1: a
# request larger than ASan's limit returns null as the system allocator does (runtime/test_factories checks that
# the library turns a failed 2^60-byte allocation into a typed error), instead of ASan ending the process.
SHARDRT_ASAN_BASE="detect_leaks=1:halt_on_error=1:check_initialization_order=1:strict_init_order=1:detect_odr_violation=2:verify_asan_link_order=0:allocator_may_return_null=1"
# UBSan: the build has -fno-sanitize-recover=all, so every check already aborts; halt_on_error keeps that so for any
# object built without the flag, and each report carries its stack.
SHARDRT_UBSAN_BASE="halt_on_error=1:print_stacktrace=1"
# LSan: leaks inside OpenMPI, hwloc, PMIx, libevent and OpenBLAS are theirs (lsan.supp: by library, never ours).
export LSAN_OPTIONS="suppressions=$_sanitize_src/lsan.supp:print_suppressions=0"
# sanitize_logs_into DIR: the reports of every process started from here on go to DIR/{asan,ubsan}.<pid> (tools/test
# gives each ctest entry a folder of its own, so its table can say which entry a report came from).
sanitize_logs_into() {
  export SHARDRT_SANITIZE_LOGS="$1"
  mkdir -p "$1"
  export ASAN_OPTIONS="$SHARDRT_ASAN_BASE:log_path=$1/asan" UBSAN_OPTIONS="$SHARDRT_UBSAN_BASE:log_path=$1/ubsan"
}
sanitize_logs_into "$SHARDRT_SANITIZE_LOGS"
# tests/mpirun.sh's own wall-clock limit per mpiexec: ASan's 2-4x slowdown on a loaded machine needs more than 600 s.
export SHARDRT_TEST_LIMIT="${SHARDRT_TEST_LIMIT:-2400}"
unset _sanitize_src _sanitize_build _keep
