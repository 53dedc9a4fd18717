#!/usr/bin/env bash
# A real training run killed while a checkpoint save is in flight, then resumed (issue 13, "Faults"):
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
#      the state; the resumed run's first save clears the killed save's leftovers.
#   faults_train_kill.sh GEN TRAIN MPIEXEC
set -euo pipefail
gen=$1 train=$2 mpiexec=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/shardrt_faults_train.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "faults_train_kill: $*" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
       OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
steps=5
mpi2() { "$mpiexec" -n 2 --oversubscribe --bind-to none "$@" </dev/null; }

"$gen" --out "$dir/data" --mode exact --resolution 12 --train 8 --val 4 --seed 3 >/dev/null
cat > "$dir/tiny.json" <<JSON
{
  "model": {"kind": "flare", "seed": 5,
            "args": {"functional_dim": 1, "out_dim": 1, "n_layers": 2, "n_hidden": 16, "n_head": 2, "mlp_ratio": 2,
                     "slice_num": 4, "unified_pos": true, "ref": 4, "structured_shape": [12, 12]}},
  "precision": "f64",
  "optimizer": {"algorithm": "adamw", "lr": 3e-3, "weight_decay": 1e-4, "max_grad_norm": 1.0},
  "schedule": {"kind": "warmup_cosine", "warmup_steps": 1, "start_factor": 0.1, "min_factor": 0.1},
  "loss": {"kind": "relative_l2"},
  "data": {"train": "$dir/data/darcy_train.json", "batch_size": 1, "seed": 9},
  "mesh": {"ddp": 1, "domain": 2},
  "steps": $steps,
  "checkpoint": {"every": 1},
  "log": {"every": 1, "plots": false, "progress_bar": "off"},
  "validation": {"every": 0}
}
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
#    the job in its own process group, and kills its ranks — the launcher's children named shardrt-train — by pid.
python3 - "$mpiexec" "$train" "$dir" "$steps" <<'PY' || fail "no kill fell inside a save"
import glob, json, os, signal, subprocess, sys, time
mpiexec, train, d, steps = sys.argv[1:4] + [int(sys.argv[4])]
ckpt = os.path.join(d, "killed", "checkpoint")

def committed_step():
    try:
        with open(os.path.join(ckpt, "index.json")) as f:
            return json.load(f)["state"]["train"]["step"]
    except (OSError, ValueError, KeyError):
        return 0

def ranks_of(root):
    # Every descendant of the launcher that is a shardrt-train process, from /proc.
    children = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            children.setdefault(ppid, []).append((int(p), name))
    out, todo = [], [root]
    while todo:
        for pid, name in children.get(todo.pop(), []):
            todo.append(pid)
            if name.startswith("shardrt-train"):
                out.append(pid)
    return out

for attempt, delay_ms in enumerate([0, 1, 2, 4, 8, 16]):
    subprocess.run(["rm", "-rf", os.path.join(d, "killed")], check=True)
    log = open(os.path.join(d, f"killed-{attempt}.log"), "w")
    job = subprocess.Popen([mpiexec, "-n", "2", "--oversubscribe", "--bind-to", "none", train, "--config",
                            os.path.join(d, "tiny.json"), "--set", "log.out_dir=" + os.path.join(d, "killed")],
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.time() + 60
    killed, ranks = [], []
    while job.poll() is None and time.time() < deadline:
        if not ranks:
            if committed_step() >= 1:
                ranks = ranks_of(job.pid)  # once, before the watch: walking /proc takes longer than a save
            time.sleep(0.002)
        elif glob.glob(ckpt + ".tmp-*"):
            if delay_ms:
                time.sleep(delay_ms / 1000)
            for pid in ranks:
                os.kill(pid, signal.SIGKILL)
            killed = ranks
            break
        else:
            time.sleep(0.0002)  # leave the two cores to the ranks
    try:
        job.wait(timeout=30)
    except subprocess.TimeoutExpired:
        job.kill()
        sys.exit("faults_train_kill: the launcher did not end after its ranks were killed")
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
k=$(cat "$dir/killed_at")

# 3. Resume in a new mpiexec, to the end.
mpi2 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/killed" --resume >"$dir/resumed.log" 2>&1 ||
  fail "the resumed run failed: $(cat "$dir/resumed.log")"
grep -q "resumed at step $k" "$dir/resumed.log" || fail "not resumed at the committed step $k: $(head -3 "$dir/resumed.log")"
leftovers=$(ls -d "$dir/killed/checkpoint".tmp-* "$dir/killed/checkpoint".old-* 2>/dev/null || true)
[ -z "$leftovers" ] || fail "the killed save's leftovers are still there after the resumed run's saves: $leftovers"
python3 - "$dir/whole/checkpoint" "$dir/killed/checkpoint" "$k" <<'PY'
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
    sys.exit(f"faults_train_kill: checkpoint states differ: {ia['state']} vs {ib['state']}")
if sorted(a) != sorted(b):
    sys.exit(f"faults_train_kill: the checkpoints hold different pieces: {sorted(set(a) ^ set(b))}")
kinds = {k.split(".")[0] for k in a}
if not {"param", "exp_avg", "exp_avg_sq"} <= kinds:
    sys.exit(f"faults_train_kill: missing tensor kinds in the checkpoint: {sorted(kinds)}")
differ = [k for k in a if a[k] != b[k]]
if differ:
    sys.exit(f"faults_train_kill: {len(differ)} of {len(a)} saved tensors differ after the resume, e.g. {differ[:3]}")
print(f"faults_train_kill: killed mid-save after step {sys.argv[3]}, resumed: step {ia['state']['train']['step']} "
      f"checkpoint equals the uninterrupted run's, {len(a)} tensors bit for bit")
PY
