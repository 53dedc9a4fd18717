#!/usr/bin/env bash
# A real training run killed, or one of its ranks hung, while a checkpoint save is in flight, then resumed
# (issue 13, "Faults"):
#   0. a checkpoint folder that cannot be written stops every rank at start-up, before step 1;
#   1. shardrt-train on a tiny Darcy FLARE (12 x 12, fp64) on 2 ranks (1 x 2: the points over domain), 5 steps,
#      checkpoint.every=1, uninterrupted: the reference;
#   2. the same run again; once it has committed a checkpoint (step >= 1), a watcher polls for the save's staging
#      directory (<dir>.tmp-<nonce>) and SIGKILLs every rank the moment one appears (after a delay that grows with
#      each attempt, so the attempts land at different points of the save); the attempt counts only when the
#      staging directory is still there after the kill, proof that the kill fell inside a save (else it retries);
#   3. a new mpiexec with --resume must load the committed checkpoint (step k-1, or k when the kill came after
#      the commit), say "resumed at step <that>", run to step 5, and its final checkpoint must equal the
#      uninterrupted run's bit for bit: every saved tensor (parameters, exp_avg, exp_avg_sq, the normaliser) and
#      the state; the resumed run's first save clears the killed save's leftovers;
#   4. one rank hung instead (SIGSTOP: it holds its memory and its MPI connections but runs no more), rank 1 and
#      then rank 0 (the one that commits), the moment a save's staging directory appears, with a 2 s communication
#      deadline: the other rank must report its collective as timed out and the whole job must end non-zero within
#      deadline + 5 s of the stop (the survivor's MPI_Abort; the launcher ends the stopped rank); the attempt counts
#      when the staging directory is left behind (the stop fell inside the save) and retries otherwise; --resume
#      from the checkpoint committed before it must end bit-identical to the uninterrupted run, as in 3.
#   faults_train_save.sh GEN TRAIN MPIEXEC
set -euo pipefail
gen=$1 train=$2 mpiexec=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # train_watch.py, the watchers' shared helpers
dir=$(mktemp -d "${TMPDIR:-/tmp}/shardrt_faults_train.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "faults_train_save: $*" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
       OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
steps=5
mpi2() { "$mpiexec" -n 2 --oversubscribe --bind-to none "$@" </dev/null; }

source "$here/../tools/tiny_darcy.sh"
tiny_darcy "$gen" "$dir" <<JSON
  "data": {"train": "$dir/data/darcy_train.json", "batch_size": 1, "seed": 9},
  "mesh": {"ddp": 1, "domain": 2},
  "steps": $steps,
  "checkpoint": {"every": 1},
  "validation": {"every": 0}
JSON

# 0. A checkpoint folder under a regular file (root is not stopped by permissions; ENOTDIR stops everyone): every
#    rank fails at the start-up check, before step 1, naming the folder.
echo "not a directory" >"$dir/a-file"
if mpi2 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/unwritable" \
    --set checkpoint.dir="$dir/a-file/ckpt" >"$dir/unwritable.log" 2>&1; then
  fail "a run whose checkpoint folder cannot be written was accepted"
fi
grep -q "the checkpoint directory '$dir/a-file/ckpt' cannot be written: .*Not a directory" "$dir/unwritable.log" ||
  fail "no clear error for the unwritable checkpoint folder: $(cat "$dir/unwritable.log")"
if grep -q "^step " "$dir/unwritable.log"; then fail "a step ran before the unwritable folder was refused"; fi

# 1. The uninterrupted reference.
mpi2 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/whole" >"$dir/whole.log" 2>&1 ||
  fail "the uninterrupted run failed: $(cat "$dir/whole.log")"

# 2. Killed mid-save. The watcher (python: polling from bash would be too slow to see a save of a few ms) starts
#    the job and kills its ranks by pid, found by the tag SHARDRT_FAULTS_JOB in their environment
#    (train_watch.strike_mid_save, which the hang watcher of 4. uses too).
PYTHONPATH="$here" python3 - "$mpiexec" "$train" "$dir" "$steps" <<'PY' || fail "no kill fell inside a save"
import glob, json, os, signal, subprocess, sys, time
import train_watch
mpiexec, train, d, steps = sys.argv[1:4] + [int(sys.argv[4])]
ckpt = os.path.join(d, "killed", "checkpoint")

def committed_step():
    return train_watch.committed_step(ckpt)

def kill_all(ranks):
    for pid in ranks.values():
        os.kill(pid, signal.SIGKILL)

for attempt, delay_ms in enumerate([0, 1, 2, 4, 8, 16]):
    subprocess.run(["rm", "-rf", os.path.join(d, "killed")], check=True)
    log = open(os.path.join(d, f"killed-{attempt}.log"), "w")
    tag = f"{d}/killed-{attempt}"
    job = subprocess.Popen([mpiexec, "-n", "2", "--oversubscribe", "--bind-to", "none", train, "--config",
                            os.path.join(d, "tiny.json"), "--set", "log.out_dir=" + os.path.join(d, "killed")],
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           env=dict(os.environ, SHARDRT_FAULTS_JOB=tag))
    ranks, struck_at = train_watch.strike_mid_save(job, ckpt, tag, 2, delay_ms, kill_all)
    killed = sorted(ranks.values()) if struck_at else []
    try:
        job.wait(timeout=30)
    except subprocess.TimeoutExpired:
        job.kill()
        sys.exit("faults_train_save: the launcher did not end after its ranks were killed")
    staging = glob.glob(ckpt + ".tmp-*")
    step = committed_step()
    print(f"attempt {attempt}: delay {delay_ms} ms, killed ranks {killed}, committed step {step}, "
          f"staging {[sorted(os.listdir(s)) for s in staging]}")
    if len(killed) == 2 and staging and 1 <= step < steps:
        with open(os.path.join(d, "killed_at"), "w") as f:
            f.write(str(step))
        sys.exit(0)
sys.exit(1)
PY
# resume_and_compare OUT_DIR STEP WHAT: a new mpiexec with --resume in OUT_DIR must resume at STEP, run to the end,
# clear every leftover of the interrupted save, and end with a checkpoint equal to the uninterrupted run's: every
# saved piece byte for byte, read straight from the safetensors files, and the state.
resume_and_compare() {
  local out=$1 k=$2 what=$3
  mpi2 "$train" --config "$dir/tiny.json" --set log.out_dir="$out" --resume >"$out.resumed.log" 2>&1 ||
    fail "$what: the resumed run failed: $(cat "$out.resumed.log")"
  grep -q "resumed at step $k" "$out.resumed.log" ||
    fail "$what: not resumed at the committed step $k: $(head -3 "$out.resumed.log")"
  local leftovers
  leftovers=$(ls -d "$out/checkpoint".tmp-* "$out/checkpoint".old-* 2>/dev/null || true)
  [ -z "$leftovers" ] || fail "$what: the interrupted save's leftovers are still there after the resumed run's saves: $leftovers"
  python3 - "$dir/whole/checkpoint" "$out/checkpoint" "$k" "$what" <<'PY'
# Every saved piece of the two final checkpoints, byte for byte, read straight from the safetensors files.
import json, os, struct, sys
def pieces(d):
    index = json.load(open(os.path.join(d, "index.json")))
    out = {}
    for f in sorted(x for x in os.listdir(d) if x.endswith(".safetensors")):
        raw = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        for key, t in json.loads(raw[8:8 + n]).items():
            if key != "__metadata__":
                lo, hi = t["data_offsets"]
                out[key] = (t["dtype"], raw[8 + n + lo:8 + n + hi])
    return index, out
(ia, a), (ib, b) = pieces(sys.argv[1]), pieces(sys.argv[2])
if ia["state"] != ib["state"]:
    sys.exit(f"faults_train_save: checkpoint states differ: {ia['state']} vs {ib['state']}")
if sorted(a) != sorted(b):
    sys.exit(f"faults_train_save: the checkpoints hold different pieces: {sorted(set(a) ^ set(b))}")
kinds = {k.split(".")[0] for k in a}
if not {"param", "exp_avg", "exp_avg_sq"} <= kinds:
    sys.exit(f"faults_train_save: missing tensor kinds in the checkpoint: {sorted(kinds)}")
differ = [k for k in a if a[k] != b[k]]
if differ:
    sys.exit(f"faults_train_save: {len(differ)} of {len(a)} saved tensors differ after the resume, e.g. {differ[:3]}")
print(f"faults_train_save: {sys.argv[4]} after step {sys.argv[3]}, resumed: step {ia['state']['train']['step']} "
      f"checkpoint equals the uninterrupted run's, {len(a)} tensors bit for bit")
PY
}

# 3. Resume the killed run in a new mpiexec, to the end.
resume_and_compare "$dir/killed" "$(cat "$dir/killed_at")" "killed mid-save"

# 4. One rank hung mid-save, each in turn.
for hung in 1 0; do
  PYTHONPATH="$here" python3 - "$mpiexec" "$train" "$dir" "$steps" "$hung" <<'PY' || fail "rank $hung hung mid-save: see above"
import glob, json, os, signal, subprocess, sys, time
import train_watch
mpiexec, train, d, steps, hung = sys.argv[1:4] + [int(sys.argv[4]), int(sys.argv[5])]
out = os.path.join(d, f"hung-{hung}")
ckpt = os.path.join(out, "checkpoint")
deadline_s, bound_s = 2, 2 + 5

def committed_step():
    return train_watch.committed_step(ckpt)

def attempt(delay_ms):
    # One run with rank `hung` stopped `delay_ms` after a save's staging directory appears. Returns the seconds
    # from the stop to the end of the job (None when no stop happened), the job's status and its log.
    subprocess.run(["rm", "-rf", out], check=True)
    log_path = out + ".log"
    env = dict(os.environ, SHARDRT_COMM_TIMEOUT=str(deadline_s), SHARDRT_FAULTS_JOB=out)
    with open(log_path, "w") as log:
        job = subprocess.Popen([mpiexec, "-n", "2", "--oversubscribe", "--bind-to", "none", train, "--config",
                                os.path.join(d, "tiny.json"), "--set", "log.out_dir=" + out],
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        ranks, stopped_at = train_watch.strike_mid_save(
            job, ckpt, out, 2, delay_ms, lambda ranks: os.kill(ranks[hung], signal.SIGSTOP))
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            for pid in ranks.values():
                os.kill(pid, signal.SIGKILL)
            job.kill()
            sys.exit(f"faults_train_save: the job did not end within 60 s of rank {hung}'s stop")
    took = time.time() - stopped_at if stopped_at else None
    return took, job.returncode, open(log_path).read()

# The survivor's deadline ends the job through MPI_Abort (a rank cannot be released from a collective its peer
# never joins), so a save interrupted this way leaves its staging directory, as a killed one does: its presence
# after the job is the proof that the stop fell inside the save, and the resumed run's first save must clear it.
for delay_ms in [0, 1, 2, 4, 8]:
    took, status, text = attempt(delay_ms)
    step = committed_step()
    staging = glob.glob(ckpt + ".tmp-*")
    if took is None:
        sys.exit(f"faults_train_save: no save of the run was seen to stop rank {hung} in: {text[-2000:]}")
    print(f"rank {hung} stopped {delay_ms} ms into a save (committed step {step}, staging left: {bool(staging)}): "
          f"the job ended with status {status} {took:.2f} s later")
    if status == 0:
        sys.exit(f"faults_train_save: the job with rank {hung} hung mid-save exited 0: {text[-2000:]}")
    if took > bound_s:
        sys.exit(f"faults_train_save: the job took {took:.2f} s to end after rank {hung} hung (bound {bound_s} s)")
    survivor = 1 - hung
    if f"[rank {survivor}]" not in text or f"timed out after {deadline_s} s" not in text:
        sys.exit(f"faults_train_save: rank {survivor} did not report a collective timed out: {text[-2000:]}")
    if staging and 1 <= step < steps:
        print("  rank %d: %s" % (survivor, next(l for l in text.splitlines()
                                                 if f"[rank {survivor}]" in l and "timed out" in l).strip()[:300]))
        break
else:
    sys.exit(f"faults_train_save: no stop of rank {hung} fell inside a save")
with open(out + ".step", "w") as f:
    f.write(str(step))
PY
  resume_and_compare "$dir/hung-$hung" "$(cat "$dir/hung-$hung.step")" "rank $hung hung mid-save"
done
