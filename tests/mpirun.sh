#!/usr/bin/env bash
# Launches one test binary under mpiexec for meson test and ctest alike: N ranks oversubscribed on the cores,
# stdin closed (mpiexec can hang after an MPI_Abort while its stdin is open) and a wall-clock limit of its own,
# so a stuck job ends with a failure instead of waiting for the harness.
# Usage: mpirun.sh <ranks> <binary> [args...]
set -u
ranks="$1"
shift
# Run by hand, the tests get the suite's deadline and checked collectives too (ctest sets them the same way).
export SHARDRT_COMM_TIMEOUT="${SHARDRT_COMM_TIMEOUT:-120}" SHARDRT_COMM_CHECK="${SHARDRT_COMM_CHECK:-1}"
exec timeout -k 10 "${SHARDRT_TEST_LIMIT:-600}" mpiexec -n "$ranks" --oversubscribe --bind-to none "$@" </dev/null
