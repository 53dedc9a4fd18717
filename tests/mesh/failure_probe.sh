#!/usr/bin/env bash
# Driver of the failure probe: runs it under its own wall-clock limit and checks that the job exits non-zero
# (and not by the launcher's timeout), that it ended within the configured deadline plus start-up slack rather
# than hanging, and that the waiting ranks printed their CommError.
#   failure_probe.sh <mpiexec> <probe> <ranks> <mode: throw|hang> [checked: 0|1, default 0]
# Checked (SHARDRT_COMM_CHECK=1), the waiting ranks time out in the all_reduce's signature check instead, under
# the same deadline and with the same report.
set -u
mpiexec=$1 probe=$2 ranks=$3 mode=$4 checked=${5:-0}
deadline=3
export SHARDRT_COMM_CHECK=$checked SHARDRT_COMM_TIMEOUT=$deadline \
       OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
       OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s%N)
# stdin from /dev/null: mpiexec forwards stdin to rank 0, and a stdin that never closes (as under ctest) keeps it
# from exiting after the abort. -k: a launcher that ignores SIGTERM is killed 10 s later (exit 137).
timeout -k 10 120 "$mpiexec" -n "$ranks" --oversubscribe --bind-to none "$probe" "$mode" >"$log" 2>&1 </dev/null
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$log"
echo "failure_probe.sh: mode=$mode checked=$checked ranks=$ranks exit=$rc elapsed=${elapsed_ms} ms" \
     "deadline=${deadline} s"

fail() { echo "failure_probe.sh: FAILED: $*"; exit 1; }
test $rc -ne 0 -a $rc -ne 124 -a $rc -ne 137 || fail "expected a non-zero exit other than the launcher timeout (124, 137), got $rc"
grep -q "should be impossible" "$log" && fail "an all_reduce returned although a rank never joined"
[ "$elapsed_ms" -lt $(( (deadline + 40) * 1000 )) ] || fail "the job took ${elapsed_ms} ms, far past the ${deadline} s deadline"
if [ "$mode" = throw ]; then
  # The failed rank's own error is reported; its exit takes the job down at once.
  grep -q "ValueError .*fails before the all_reduce" "$log" || fail "the failing rank's ValueError was not printed"
else
  # The waiting ranks time out and say exactly what they were waiting in.
  grep -q "CommError" "$log" || fail "no CommError was printed"
  grep -q "all_reduce on axis 'domain'" "$log" || fail "the CommError does not name the collective and axis"
  grep -q "world ranks {" "$log" || fail "the CommError does not name the ranks"
  grep -q "timed out after $deadline s" "$log" || fail "the CommError does not state the deadline"
  [ "$elapsed_ms" -ge $(( deadline * 1000 )) ] || fail "the job ended before the deadline: not the timeout path"
  if [ "$checked" = 1 ]; then
    grep -q "(signature check): timed out" "$log" || fail "checked, the wait was not in the signature check"
  fi
fi
echo "failure_probe.sh: passed"
