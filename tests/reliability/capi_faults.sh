#!/usr/bin/env bash
# The C API under a failing rank, from a C or a Fortran client (capi_fault_probe.c / .f90): for each mode, one
# mpiexec -n 3 job in which rank 1 returns an error from, is SIGKILLed in, or is hung (SIGSTOP) in a
# shardrt_train_step, a shardrt_model_forward or a shardrt_checkpoint_save, with and without SHARDRT_AGREE_ERRORS.
#   capi_faults.sh <mpiexec> <probe> <fault>:<call>:<agree>...      (fault: error|kill|stop|killstart|stopstart|
#                                                                    killbefore; call: train_step|forward|save;
#                                                                    agree: 0|1)
# killstart / stopstart: rank 1 dies or stops in the call's first step, the start agreement; killbefore: just
# before the call, so that the others wait in the start agreement (C client only).
# Asserted for every mode, from the files each live rank writes (capi_fault_probe.c):
#   - ranks 0 and 2 return an error status for the call within the deadline (SHARDRT_COMM_TIMEOUT=2) + 5 s of
#     entering it, whose message names the call and rank 1 as the rank that failed (its own words quoted where it
#     failed by itself: "rank 1 failed this call (...)", "quoted from rank 1", "check failed on rank(s) 1"; "no
#     word from rank 1" where it died or hangs);
#   - error: rank 1 returns its own status (SHARDRT_ERR_COPY_FORBIDDEN, or SHARDRT_ERR_IO for the save) within the
#     same bound; kill / stop: rank 1 never returned;
#   - save: the checkpoint folder holds a complete checkpoint, the previous one (step 1) or the new one (step 2),
#     every parameter equal to that step's (capi_fault_probe verify, a new one-rank job), and no staging folder is
#     left behind (rank 0, which commits and cleans up, is alive).
# Launcher: OpenMPI's mpiexec would kill every rank as soon as the victim dies; orte_abort_on_non_zero_status=0
# turns that off (as tests/mesh/failure_probe.sh does), so what the survivors get is the library's doing. The job
# ends with the probe's MPI_Abort once every live rank has written its result.
set -u
mpiexec=$1 probe=$2
shift 2
deadline=2
slack=5
export SHARDRT_COMM_TIMEOUT=$deadline OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
       OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_orte_abort_on_non_zero_status=0 OPENBLAS_NUM_THREADS=1 \
       OMP_NUM_THREADS=1
client=$(basename "$probe")

field() { sed -n "s/.*\\b$2=\\([^ ]*\\).*/\\1/p" "$1"; }  # field <file> <key>: the value of key=value

run_mode() {
  local mode=$1 fault call agree
  IFS=: read -r fault call agree <<<"$mode"
  local work="$dir/$fault-$call-$agree"
  mkdir -p "$work"
  local fn=shardrt_$call
  [ "$call" = forward ] && fn=shardrt_model_forward
  [ "$call" = save ] && fn=shardrt_checkpoint_save
  local errors=() start end
  fail() { errors+=("$*"); }
  start=$(date +%s%N)
  timeout -k 5 $((deadline + 40)) "$mpiexec" -n 3 --oversubscribe --bind-to none "$probe" "$fault" "$call" "$agree" \
    "$work" >"$work/job.log" 2>&1 </dev/null
  end=$(date +%s%N)
  [ $(( (end - start) / 1000000 )) -lt $(( (deadline + 40) * 1000 )) ] || fail "the launcher's time limit ended the job (a hang)"
  local summary=""
  for r in 0 1 2; do
    local f="$work/rank-$r.txt"
    if [ "$r" = 1 ] && [ "$fault" != error ]; then
      local verb=killed
      [[ $fault == stop* ]] && verb=stopped
      [ ! -f "$f" ] || fail "rank 1 returned from $fn although it was $verb: $(cat "$f")"
      continue
    fi
    [ -f "$f" ] || { fail "rank $r wrote no result"; continue; }
    local status seconds
    status=$(field "$f" status) seconds=$(field "$f" seconds)
    summary+=" rank $r $status after ${seconds} s;"
    grep -q "^call=$fn " "$f" || fail "rank $r: not the call $fn: $(cat "$f")"
    [ "$status" != SHARDRT_OK ] || fail "rank $r: $fn returned SHARDRT_OK"
    awk -v s="$seconds" -v b=$((deadline + slack)) 'BEGIN { exit !(s <= b) }' ||
      fail "rank $r: returned after $seconds s, past the deadline + $slack s"
    grep -q "message=$fn: " "$f" || fail "rank $r: the message does not name $fn: $(cat "$f")"
    if [ "$r" = 1 ]; then
      local own=SHARDRT_ERR_COPY_FORBIDDEN
      [ "$call" = save ] && own=SHARDRT_ERR_IO
      [ "$status" = "$own" ] || fail "rank 1 returned $status, not its own $own: $(cat "$f")"
    else
      grep -Eq "rank 1 failed this call|no word from rank 1 |quoted from rank 1;|check failed on rank\(s\) 1 of" "$f" ||
        fail "rank $r: the message does not name rank 1 as the rank that failed: $(cat "$f")"
      if [ "$fault" != error ] || { [ "$agree" = 0 ] && [ "$call" != save ]; }; then
        [ "$status" = SHARDRT_ERR_COMM ] || fail "rank $r: $status, expected SHARDRT_ERR_COMM"
      fi
    fi
  done
  if [ "$call" = save ]; then
    if "$mpiexec" -n 1 "$probe" verify "$work" >"$work/verify.log" 2>&1 </dev/null; then
      summary+=" $(sed -n 's/^verify: the checkpoint holds \(step [12] ([^)]*)\).*/checkpoint: \1/p' "$work/verify.log")"
    else
      fail "the checkpoint: $(cat "$work/verify.log")"
    fi
    local left
    left=$(cd "$work" && ls -d ckpt.tmp-* ckpt.old-* 2>/dev/null | tr '\n' ' ')
    [ -z "$left" ] || fail "left behind by the save: $left"
  fi
  if [ ${#errors[@]} -gt 0 ]; then
    cat "$work/job.log"
    for r in 0 1 2; do [ -f "$work/rank-$r.txt" ] && cat "$work/rank-$r.txt"; done
    printf 'capi_faults.sh:   %s\n' "${errors[@]}"
    echo "capi_faults.sh: FAILED client=$client mode=$mode"
  else
    echo "capi_faults.sh: passed client=$client fault=$fault call=$fn agree=$agree:$summary"
  fi
}

# Two modes at a time (each is mostly a wait for the deadline), their reports printed in order.
dir=$(mktemp -d "${TMPDIR:-/tmp}/shardrt_capi_faults.XXXXXX")
trap 'rm -rf "$dir"' EXIT
modes=("$@")
for ((i = 0; i < ${#modes[@]}; i += 2)); do
  for ((j = i; j < i + 2 && j < ${#modes[@]}; ++j)); do
    run_mode "${modes[$j]}" >"$dir/$j.report" 2>&1 &
  done
  wait
done
failures=0
for ((j = 0; j < ${#modes[@]}; ++j)); do
  cat "$dir/$j.report"
  grep -q "^capi_faults.sh: passed " "$dir/$j.report" || failures=$((failures + 1))
done
[ $failures -eq 0 ] || { echo "capi_faults.sh: $failures of ${#modes[@]} mode(s) FAILED"; exit 1; }
echo "capi_faults.sh: all ${#modes[@]} modes passed"
