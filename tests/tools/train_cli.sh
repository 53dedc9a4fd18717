#!/usr/bin/env bash
# shardrt-train as a user runs it, on a tiny Darcy set (12 x 12, FLARE of two small layers, fp64):
#   1. the same 4 optimizer steps (batch 2) under mpiexec -n 1 (1x1: both samples in one forward, and with
#      data.micro_batch=1 one sample per forward, two micro-batches accumulated), -n 2 (1x2: the points over domain)
#      and -n 4 (2x2) give the same loss at every step (to 1e-10 relative) and the same validation relative L2;
#   2. 5 steps + checkpoint, then a new process with --resume for 5 more, equals the uninterrupted 10 steps bit for
#      bit: every tensor of the two final checkpoints (parameters and optimizer state) and the CSV's %.17g losses, 2x2;
#   3. a misspelt config key stops every rank with the same message and a non-zero exit;
#   4. the CSV, the loss plot and the panel are written;
#   5. "precision": "bf16-autocast" trains (the loss goes down, near the f32 run's).
#   6. --device cuda:0 trains like the CPU where a GPU is present, and is refused clearly where none is.
#   train_cli.sh GEN TRAIN MPIEXEC
set -euo pipefail
gen=$1 train=$2 mpiexec=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/shardrt_train_cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "train_cli: $*" >&2; exit 1; }
mpi() { local n=$1; shift; "$mpiexec" -n "$n" --oversubscribe --bind-to none "$@"; }

source "$(dirname "${BASH_SOURCE[0]}")/tiny_darcy.sh"
tiny_darcy "$gen" "$dir" <<JSON
  "data": {"train": "$dir/data/darcy_train.json", "val": "$dir/data/darcy_val.json", "batch_size": 2, "seed": 9},
  "steps": 4,
  "validation": {"every": 2}
JSON

# 1. The same run on three meshes.
mpi 1 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/m1" --set mesh.ddp=1 --set mesh.domain=1 >"$dir/m1.log"
mpi 1 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/m1b1" --set mesh.ddp=1 --set mesh.domain=1 \
    --set data.micro_batch=1 >"$dir/m1b1.log"
grep -q "batch 2 (1 per micro-batch x 2)" "$dir/m1b1.log" || fail "m1b1: not two micro-batches of 1: $(head -n 1 "$dir/m1b1.log")"
grep -q "batch 2 (2 per micro-batch x 1)" "$dir/m1.log" || fail "m1: not one micro-batch of 2: $(head -n 1 "$dir/m1.log")"
mpi 2 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/m2" --set mesh.ddp=1 --set mesh.domain=2 >"$dir/m2.log"
mpi 4 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/m4" --set mesh.ddp=2 --set mesh.domain=2 \
    --set log.plots=true >"$dir/m4.log"
for m in m1 m1b1 m2 m4; do
  [ "$(wc -l <"$dir/$m/metrics.csv")" = 5 ] || fail "$m: expected a header and 4 rows in metrics.csv"
done
python3 - "$dir/m1/metrics.csv" "$dir/m1b1/metrics.csv" "$dir/m2/metrics.csv" "$dir/m4/metrics.csv" <<'PY'
import csv, sys
runs = [list(csv.DictReader(open(p))) for p in sys.argv[1:]]
ref = runs[0]
for col in ("loss", "val_rel_l2"):
    for other in runs[1:]:
        for a, b in zip(ref, other):
            if a[col] == "" and b[col] == "":
                continue
            x, y = float(a[col]), float(b[col])
            if abs(x - y) > 1e-10 * abs(x):
                sys.exit(f"train_cli: step {a['step']} {col}: {x!r} on 1 rank vs {y!r}")
losses = [float(r["loss"]) for r in ref]
if not all(l == l and 0 < l < 10 for l in losses) or losses[-1] >= losses[0]:
    sys.exit(f"train_cli: the loss did not go down over 4 steps: {losses}")
if ref[1]["val_rel_l2"] == "" or ref[3]["val_rel_l2"] == "":
    sys.exit("train_cli: no validation relative L2 at steps 2 and 4")
print("meshes 1x1 (micro-batches of 2 and 1), 1x2, 2x2 agree; losses", losses)
PY
grep -q "validation relative L2 (darcy, 4 samples)" "$dir/m4.log" || fail "no final validation line: $(cat "$dir/m4.log")"
for f in loss.png panel.png config.json checkpoint/index.json; do [ -s "$dir/m4/$f" ] || fail "m4: no $f"; done
[ "$(od -An -tx1 -N8 "$dir/m4/panel.png" | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "panel.png is not a PNG"

# The other losses: the same 2 steps on 1 rank and on 2x2.
for loss in mse huber; do
  for n in 1 4; do
    mpi $n "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/$loss$n" --set mesh.ddp=$(( n / 2 > 0 ? 2 : 1 )) \
        --set mesh.domain=$(( n / 2 > 0 ? 2 : 1 )) --set loss.kind=$loss --set loss.huber_delta=0.5 --set steps=2 \
        --set validation.every=0 >/dev/null
  done
  python3 - "$dir/${loss}1/metrics.csv" "$dir/${loss}4/metrics.csv" "$loss" <<'PY'
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
for x, y in zip(a, b):
    u, v = float(x["loss"]), float(y["loss"])
    if not (u > 0 and abs(u - v) <= 1e-10 * u):
        sys.exit(f"train_cli: {sys.argv[3]} step {x['step']}: {u!r} on 1 rank vs {v!r} on 2x2")
print(f"{sys.argv[3]}: 1x1 and 2x2 agree", [float(r["loss"]) for r in a])
PY
done

# bf16 autocast (f32 master parameters, 16-bit products): the loss goes down over 6 steps on 1 rank and follows
# the f32 run's within 5 % (bf16's u = 2^-8 per product, through two FLARE layers); an unknown precision is refused.
for p in f32 bf16-autocast; do
  mpi 1 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/ac-$p" --set precision=$p --set steps=6 \
      --set validation.every=0 >"$dir/ac-$p.log"
done
grep -q "f32 masters, bf16 autocast" "$dir/ac-bf16-autocast.log" || fail "no autocast banner: $(cat "$dir/ac-bf16-autocast.log")"
python3 - "$dir/ac-f32/metrics.csv" "$dir/ac-bf16-autocast/metrics.csv" <<'PY'
import csv, sys
f32, bf16 = ([float(r["loss"]) for r in csv.DictReader(open(p))] for p in sys.argv[1:3])
if not all(l == l and 0 < l < 10 for l in bf16) or bf16[-1] >= bf16[0]:
    sys.exit(f"train_cli: the bf16-autocast loss did not go down over 6 steps: {bf16}")
if f32 == bf16:
    sys.exit("train_cli: bf16-autocast gave the f32 losses bit for bit: autocast did nothing")
worst = max(abs(a - b) / a for a, b in zip(f32, bf16))
if worst > 0.05:
    sys.exit(f"train_cli: bf16-autocast losses {bf16} are more than 5 % from f32's {f32}")
print(f"bf16-autocast: losses {bf16}, at most {worst:.2e} relative from f32")
PY
if mpi 1 "$train" --config "$dir/tiny.json" --set precision=bf16 >/dev/null 2>"$dir/prec.err"; then
  fail "precision bf16 (not an autocast precision) was accepted"
fi
grep -q "bf16-autocast or f16-autocast" "$dir/prec.err" || fail "unexpected message: $(cat "$dir/prec.err")"

# A diverging run (f32, a huge learning rate): every rank stops at the first non-finite loss, with one message.
if mpi 2 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/nan" --set mesh.domain=2 --set precision=f32 \
    --set optimizer.lr=1e30 --set optimizer.max_grad_norm=0 --set steps=20 >/dev/null 2>"$dir/nan.err"; then
  fail "a diverging run finished without an error"
fi
grep -q "the loss is .* at step" "$dir/nan.err" || fail "no non-finite loss message: $(cat "$dir/nan.err")"

# 2. Bit-identical resume in a new process: 10 steps in one run equal 5 steps + checkpoint, then a NEW process that
#    loads it (--resume) and runs 5 more — every parameter and optimizer-state tensor of the two final checkpoints
#    bit for bit (compare_checkpoints below: the saved tensors, not printed losses), and the CSV's losses too; 2x2.
mpi 4 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/u10" --set mesh.ddp=2 --set mesh.domain=2 \
    --set steps=10 --set validation.every=0 >/dev/null
mpi 4 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/r" --set mesh.ddp=2 --set mesh.domain=2 \
    --set steps=10 --set validation.every=0 --stop-after 5 >"$dir/r1.log"
grep -q "stopped after step 5" "$dir/r1.log" || fail "no stop message: $(cat "$dir/r1.log")"
mpi 4 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/r" --set mesh.ddp=2 --set mesh.domain=2 \
    --set steps=10 --set validation.every=0 --resume >"$dir/r2.log"
grep -q "resumed at step 5" "$dir/r2.log" || fail "no resume message: $(cat "$dir/r2.log")"
cut -d, -f1-4 "$dir/u10/metrics.csv" >"$dir/whole"
cut -d, -f1-4 "$dir/r/metrics.csv" >"$dir/resumed"
cmp -s "$dir/whole" "$dir/resumed" || fail "resumed run's losses differ from the uninterrupted one:
$(paste -d'|' "$dir/whole" "$dir/resumed")"
python3 - "$dir/u10/checkpoint" "$dir/r/checkpoint" <<'PY'
# Every saved piece (parameters, exp_avg, exp_avg_sq, the normaliser) of the two checkpoints, byte for byte, read
# straight from the safetensors files the index names; and the same state (step counters, loader position).
import json, os, struct, sys
def pieces(d):
    index = json.load(open(os.path.join(d, "index.json")))
    out = {}
    for f in sorted(x for x in os.listdir(d) if x.endswith(".safetensors")):
        raw = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        for key, t in header.items():
            if key == "__metadata__":
                continue
            lo, hi = t["data_offsets"]
            out[key] = (t["dtype"], raw[8 + n + lo:8 + n + hi])
    return index, out
(ia, a), (ib, b) = pieces(sys.argv[1]), pieces(sys.argv[2])
if ia["state"] != ib["state"]:
    sys.exit(f"train_cli: checkpoint states differ: {ia['state']} vs {ib['state']}")
if sorted(a) != sorted(b):
    sys.exit(f"train_cli: the checkpoints hold different pieces: {sorted(set(a) ^ set(b))}")
kinds = {k.split(".")[0] for k in a}
for want in ("param", "exp_avg", "exp_avg_sq"):
    if want not in kinds:
        sys.exit(f"train_cli: no {want} tensors in the checkpoint: {sorted(kinds)}")
differ = [k for k in a if a[k] != b[k]]
if differ:
    sys.exit(f"train_cli: {len(differ)} of {len(a)} saved tensors differ after resume, e.g. {differ[:3]}")
print(f"resume: 10 steps == 5 + new process + 5, {len(a)} saved tensors bit for bit (step {ia['state']['step']})")
PY
# A run stopped with one sample per forward (data.micro_batch=1) resumes with two (the loader continues at the same
# sample; the losses are the uninterrupted run's to 1e-10, as a change of micro-batch is a change of summation order).
mpi 1 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/rb" --set steps=6 --set validation.every=0 \
    --set data.micro_batch=1 --stop-after 3 >/dev/null
mpi 1 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/rb" --set steps=6 --set validation.every=0 \
    --resume >/dev/null
mpi 1 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/ub" --set steps=6 --set validation.every=0 >/dev/null
python3 - "$dir/ub/metrics.csv" "$dir/rb/metrics.csv" <<'PY'
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:])
if len(a) != 6 or len(b) != 6:
    sys.exit(f"train_cli: micro-batch resume: {len(a)} and {len(b)} rows, expected 6")
for x, y in zip(a, b):
    u, v = float(x["loss"]), float(y["loss"])
    if abs(u - v) > 1e-10 * u:
        sys.exit(f"train_cli: micro-batch resume, step {x['step']}: {u!r} uninterrupted vs {v!r}")
print("resume across data.micro_batch 1 -> 2: losses equal")
PY

# 6. --device cuda:0: with a GPU, the same 4 steps (f64) give the 1-rank losses to 1e-9 relative (different
# summation orders on the device); without one, a clear DeviceError and a non-zero exit.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  mpi 1 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/gpu" --device cuda:0 >"$dir/gpu.log"
  python3 - "$dir/m1/metrics.csv" "$dir/gpu/metrics.csv" <<'PY'
import csv, sys
cpu, gpu = [list(csv.DictReader(open(p))) for p in sys.argv[1:]]
for a, b in zip(cpu, gpu):
    x, y = float(a["loss"]), float(b["loss"])
    if abs(x - y) > 1e-9 * abs(x):
        sys.exit(f"train_cli: step {a['step']} loss {x!r} on the cpu vs {y!r} on cuda:0")
print("cuda:0 matches the cpu run:", [float(r["loss"]) for r in gpu])
PY
else
  if mpi 1 "$train" --config "$dir/tiny.json" --set log.out_dir="$dir/gpu" --device cuda:0 >/dev/null 2>"$dir/gpu.err"; then
    fail "--device cuda:0 ran without a GPU"
  fi
  grep -q "cuda:0" "$dir/gpu.err" || fail "--device cuda:0 without a GPU: unexpected message: $(cat "$dir/gpu.err")"
  echo "no GPU: --device cuda:0 refused ($(head -c 160 "$dir/gpu.err"))"
fi

# 3. A misspelt key: every rank refuses it with one message, and the job fails.
if mpi 4 "$train" --config "$dir/tiny.json" --set optimizer.lrr=1 >"$dir/bad.out" 2>"$dir/bad.err"; then
  fail "a misspelt key was accepted"
fi
grep -q "unknown config key 'optimizer.lrr'" "$dir/bad.err" || fail "unexpected message: $(cat "$dir/bad.err")"
[ "$(grep -c "unknown config key" "$dir/bad.err")" = 1 ] || fail "the message was not agreed (printed per rank): $(cat "$dir/bad.err")"
grep -q "failing ranks\|ranks" "$dir/bad.err" || true
# A missing data file: the same on every rank.
if mpi 2 "$train" --config "$dir/tiny.json" --set mesh.domain=2 --set data.train="$dir/nothing.json" \
    >/dev/null 2>"$dir/missing.err"; then
  fail "a missing manifest was accepted"
fi
grep -q "nothing.json" "$dir/missing.err" || fail "the missing file is not named: $(cat "$dir/missing.err")"
# Values found while writing the fuzz target (tests/fuzz/fuzz_training_config.cpp): a float where an integer
# belongs (1e300 steps was an undefined float-to-int cast), integers past the range the loop can use (a ddp of
# 2^32 + 1 wrapped to 1), a --set path that is no JSON pointer, and betas that are not numbers: each a typed error
# naming the key.
bad_value() {  # bad_value EXPECTED-TEXT --set ...
  local want=$1; shift
  if mpi 1 "$train" --config "$dir/tiny.json" "$@" >/dev/null 2>"$dir/value.err"; then fail "accepted: $*"; fi
  grep -qF -- "$want" "$dir/value.err" || fail "$*: expected '$want' in: $(cat "$dir/value.err")"
}
bad_value "config key 'steps' is 1e+300 but must be an integer" --set steps=1e300
bad_value "config key 'mesh.ddp' is 4294967297 but must be an integer in [1, 2147483647]" --set mesh.ddp=4294967297
bad_value "cannot set model.args.a~b" --set 'model.args.a~b=1'
bad_value "index 99999999999 is past the end of the list model.args.structured_shape (2 elements" \
  --set 'model.args.structured_shape.99999999999=1'
bad_value "optimizer.betas must be [beta1, beta2] (two numbers)" --set 'optimizer.betas=["a","b"]'
echo "train_cli: all checks passed"
