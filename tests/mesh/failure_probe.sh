#!/usr/bin/env bash
# Driver of the failure probe (failure_probe.cpp): runs it once per mode under a wall-clock limit of its own and
# checks that the job exited non-zero, within the deadline plus 5 s (the 0.5 s grace of abort_job and the
# launcher's tear-down) counted from the moment the last rank was up (each prints when; the launch itself can take
# seconds on a busy machine), and that every surviving rank printed the error naming what it waited in.
#   failure_probe.sh <mpiexec> <probe> <ranks> <checked: 0|1> <mode>...
# Modes: throw, hang, kill:<kind> and stop:<kind> (3 ranks), hang:backward, hang:bucket (3 ranks), watch:split,
# watch:finalize
# (see failure_probe.cpp).
# Checked (SHARDRT_COMM_CHECK=1), the waiting ranks of throw/hang time out in the all_reduce's signature check
# instead, under the same deadline and with the same report.
#
# Launcher. OpenMPI's mpiexec kills every rank as soon as one exits non-zero or by a signal, so survivors never
# get to report. orte_abort_on_non_zero_status=0 turns that off, as a launcher that does not watch its ranks
# would (srun without --kill-on-bad-exit), so what ends the job is the library's deadline: the survivors'
# CommError and MPI_Abort. The other modes keep the default: no rank exits before the deadline there (throw: the
# failing rank waits in finalize_mpi), and in watch:* the watchdog's _Exit(1) is what the launcher answers.
set -u
mpiexec=$1 probe=$2 ranks=$3 checked=$4
shift 4
deadline=2
slack=5
export SHARDRT_COMM_CHECK=$checked SHARDRT_COMM_TIMEOUT=$deadline \
       OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
       OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
failures=0

# What rank <r> must print when it times out waiting in <kind> of a kill mode.
expected_error() {
  local r=$1 kind=$2
  case $kind in
    # The barrier before MPI_Finalize times out, or (where the victim's part of it arrived before it died)
    # MPI_Finalize itself blocks and the watchdog ends the rank: either way the message names MPI_Finalize.
    finalize) echo "CommError \[rank $r\]: MPI_Finalize: timed out after $deadline s" ;;
    ring_shift_async) echo "CommError \[rank $r\]: ring_shift on axis 'domain'.* timed out after $deadline s" ;;
    # A training step (failure_probe_step.cpp): the sharded linear's weight-grad all_reduce in backward, or the
    # deferred grad bucket's all_reduce, both over the domain axis.
    # backward: the second linear's weight and bias, 256 x 256 + 256 f32, packed by the patch (a blocking
    # all_reduce). bucket: a grad bucket's all_reduce_async — the first (65,792 f32: that linear's weight and
    # bias) or, where the first completed from what the victim had sent (a hang), the second (66,304 f32).
    backward) echo "CommError \[rank $r\]: all_reduce on axis 'domain' .* f32\[65792\] cpu sum: timed out after $deadline s" ;;
    bucket) echo "CommError \[rank $r\]: all_reduce on axis 'domain' .* f32\[\(65792\|66304\)\] cpu sum (async): timed out after $deadline s" ;;
    halo_exchange_async) echo "CommError \[rank $r\]: halo_exchange on axis 'domain'.* timed out after $deadline s" ;;
    *) echo "CommError \[rank $r\]: $kind on axis 'domain'.* timed out after $deadline s" ;;
  esac
}

run_mode() {
  local mode=$1 n=$ranks abort_on_exit=1
  case $mode in
    kill:*) n=3 abort_on_exit=0 ;;
    hang:*|stop:*|watch:*) n=3 ;;
  esac
  local start rc elapsed_ms
  start=$(date +%s%N)
  # stdin from /dev/null: mpiexec forwards stdin to rank 0, and a stdin that never closes (as under ctest) keeps
  # it from exiting after the abort. -k: a launcher that ignores SIGTERM is killed 5 s later.
  OMPI_MCA_orte_abort_on_non_zero_status=$abort_on_exit \
    timeout -k 5 $((deadline + 30)) "$mpiexec" -n "$n" --oversubscribe --bind-to none "$probe" "$mode" \
    >"$log" 2>&1 </dev/null
  rc=$?
  local end_ms=$(( $(date +%s%N) / 1000000 ))
  elapsed_ms=$(( end_ms - start / 1000000 ))
  # From the last rank's "up" line (the launch when no rank got that far) to the end of the job.
  local up_ms since_up_ms
  up_ms=$(sed -n 's/^failure probe: rank [0-9]* up at \([0-9]*\) ms$/\1/p' "$log" | sort -n | tail -n 1)
  since_up_ms=$(( end_ms - ${up_ms:-$(( start / 1000000 ))} ))
  local errors=()
  fail() { errors+=("$*"); }
  [ "$elapsed_ms" -lt $(( (deadline + 30) * 1000 )) ] || fail "the launcher's time limit ended the job (a hang)"
  [ $rc -ne 0 ] || fail "expected a non-zero exit, got 0"
  [ "$since_up_ms" -lt $(( (deadline + slack) * 1000 )) ] ||
    fail "the job ended ${since_up_ms} ms after its last rank was up, past deadline + ${slack} s"
  grep -q "should be impossible" "$log" && fail "a call returned although a rank never completed it"
  case $mode in
    throw|hang)
      local victim=$((n - 1))
      for ((r = 0; r < victim; ++r)); do
        grep -q "CommError \[rank $r\]: all_reduce on axis 'domain' (rank $r of $n, world ranks {" "$log" ||
          fail "rank $r printed no CommError naming the all_reduce, the axis and the ranks"
      done
      grep -q "timed out after $deadline s" "$log" || fail "no CommError states the deadline"
      [ "$since_up_ms" -ge $(( deadline * 1000 )) ] || fail "the job ended before the deadline: not the timeout path"
      if [ "$mode" = throw ]; then
        grep -q "ValueError \[rank $victim\]: .*fails before the all_reduce" "$log" || fail "the failing rank's ValueError was not printed"
        grep -q "CommError \[rank $victim\]: MPI_Finalize: timed out after $deadline s waiting for world ranks" "$log" ||
          fail "the failing rank's finalize_mpi did not time out waiting for the others"
      fi
      if [ "$checked" = 1 ]; then
        grep -q "(signature check): timed out" "$log" || fail "checked, the wait was not in the signature check"
      fi ;;
    kill:*|stop:*|hang:*)
      local kind=${mode#*:}
      for r in 0 2; do
        grep -q "$(expected_error $r "$kind")" "$log" || fail "surviving rank $r printed no CommError naming $kind"
      done ;;
    watch:split)
      for r in 0 2; do
        grep -q "CommError \[rank $r\]: Mesh(ddp=1, domain=3): MPI_Comm_split on axis 'ddp': still blocked after $deadline s" "$log" ||
          fail "rank $r: no watchdog message naming MPI_Comm_split"
      done ;;
    watch:finalize)
      for r in 0 2; do
        grep -q "CommError \[rank $r\]: MPI_Finalize: timed out after $deadline s; a peer rank has likely died" "$log" ||
          fail "rank $r: no watchdog message naming MPI_Finalize"
      done ;;
    *) fail "unknown mode $mode" ;;
  esac
  local verdict=passed
  if [ ${#errors[@]} -gt 0 ]; then
    verdict=FAILED
    cat "$log"
    printf 'failure_probe.sh:   %s\n' "${errors[@]}"
  fi
  echo "failure_probe.sh: $verdict mode=$mode checked=$checked ranks=$n exit=$rc elapsed=${elapsed_ms} ms (${since_up_ms} ms after the last rank was up) deadline=${deadline} s"
}  # writes to $log, set by the caller

# Two modes at a time (each is mostly a wait for the deadline), each with its own log and report, printed in order.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
modes=("$@")
for ((i = 0; i < ${#modes[@]}; i += 2)); do
  for ((j = i; j < i + 2 && j < ${#modes[@]}; ++j)); do
    (log="$dir/$j.log"; run_mode "${modes[$j]}" >"$dir/$j.report"; exit $?) &
  done
  wait
done
for ((j = 0; j < ${#modes[@]}; ++j)); do
  cat "$dir/$j.report"
  grep -q "^failure_probe.sh: passed mode=" "$dir/$j.report" || failures=$((failures + 1))
done
[ $failures -eq 0 ] || { echo "failure_probe.sh: $failures mode(s) FAILED"; exit 1; }
echo "failure_probe.sh: passed"
