#!/usr/bin/env bash
# shardrt-train on the ViT and the GeoTransolver, and shardrt-plan against measured runs, on a tiny Darcy set
# (16 x 16, fp64, two small layers each):
#   1. vit and geotransolver: the same 2 optimizer steps (batch 2) on 1x1, 1x2 and 2x2 give the same loss at every
#      step and the same validation relative L2 (1e-10 relative); the ViT's 2x2 run draws its plots; the
#      GeoTransolver stopped after step 1 and resumed equals its uninterrupted 2x2 run bit for bit, and its 2x2 run
#      with optimizer.mode=zero3 gives the 1x1 losses;
#   2. every run writes --measure (peak bytes within a step, ledger bytes per step per axis) and shardrt-plan --check
#      must match it: comm bytes exactly, peak bytes within 15 %, per rank — FLARE too, on 1x3 (uneven rows) and
#      2x2, the ViT on 1x3 (uneven patch rows) as well, and once with optimizer.mode=mesh.
#   models_cli.sh GEN TRAIN PLAN MPIEXEC
set -euo pipefail
gen=$1 train=$2 plan=$3 mpiexec=$4
dir=$(mktemp -d "${TMPDIR:-/tmp}/shardrt_models_cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "models_cli: $*" >&2; exit 1; }
mpi() { local n=$1; shift; "$mpiexec" -n "$n" --oversubscribe --bind-to none "$@"; }

"$gen" --out "$dir/data" --mode exact --resolution 16 --train 8 --val 4 --seed 3 >/dev/null
common='"precision": "f64",
  "optimizer": {"algorithm": "adamw", "lr": 3e-3, "weight_decay": 1e-4, "max_grad_norm": 1.0},
  "loss": {"kind": "relative_l2"},
  "data": {"train": "'$dir'/data/darcy_train.json", "val": "'$dir'/data/darcy_val.json", "batch_size": 2, "seed": 9},
  "steps": 2, "log": {"every": 1, "plots": false, "progress_bar": "off"}, "validation": {"every": 2}'
cat > "$dir/vit.json" <<JSON
{"model": {"kind": "vit", "seed": 5, "args": {"img_size": [16, 16], "patch_size": 4, "in_channels": 1,
   "num_classes": 256, "embed_dim": 16, "num_heads": 2, "depth": 2, "mlp_ratio": 2.0}}, $common}
JSON
cat > "$dir/geotransolver.json" <<JSON
{"model": {"kind": "geotransolver", "seed": 5, "args": {"functional_dim": 3, "out_dim": 1, "geometry_dim": 2,
   "n_layers": 2, "n_hidden": 16, "n_head": 2, "mlp_ratio": 2, "slice_num": 4}}, $common}
JSON
cat > "$dir/flare.json" <<JSON
{"model": {"kind": "flare", "seed": 5, "args": {"functional_dim": 1, "out_dim": 1, "n_layers": 2, "n_hidden": 16,
   "n_head": 2, "mlp_ratio": 2, "slice_num": 4, "unified_pos": true, "ref": 4, "structured_shape": [16, 16]}},
 $common}
JSON

# run MODEL DDP DOMAIN [--set ...]: trains into $dir/MODEL_DDPxDOMAIN, measures, and checks the plan against it.
run() {
  local model=$1 d=$2 n=$3; shift 3
  local out="$dir/${model}_${d}x${n}${TAG:-}"
  mpi $((d * n)) "$train" --config "$dir/$model.json" --set log.out_dir="$out" --set mesh.ddp=$d --set mesh.domain=$n \
      "$@" --measure "$out.measure.json" >"$out.log" || fail "$model on ${d}x$n failed: $(cat "$out.log")"
  "$plan" --config "$dir/$model.json" --ddp $d --domain $n "$@" --check "$out.measure.json" >"$out.plan" ||
      fail "the plan of $model on ${d}x$n does not match the measurement:
$(cat "$out.plan")"
}

for model in vit geotransolver; do
  run $model 1 1
  run $model 1 2
  if [ $model = vit ]; then run $model 2 2 --set log.plots=true; else run $model 2 2; fi
  python3 - "$model" "$dir/${model}_1x1/metrics.csv" "$dir/${model}_1x2/metrics.csv" "$dir/${model}_2x2/metrics.csv" <<'PY'
import csv, sys
model, paths = sys.argv[1], sys.argv[2:]
runs = [list(csv.DictReader(open(p))) for p in paths]
ref = runs[0]
if len(ref) != 2:
    sys.exit(f"models_cli: {model}: expected 2 rows in metrics.csv, got {len(ref)}")
for col in ("loss", "val_rel_l2"):
    for other in runs[1:]:
        for a, b in zip(ref, other):
            if a[col] == "" and b[col] == "":
                continue
            x, y = float(a[col]), float(b[col])
            if not (x == x and x > 0 and abs(x - y) <= 1e-10 * abs(x)):
                sys.exit(f"models_cli: {model} step {a['step']} {col}: {x!r} on 1 rank vs {y!r}")
if ref[1]["val_rel_l2"] == "":
    sys.exit(f"models_cli: {model}: no validation relative L2 at step 2")
print(f"{model}: 1x1, 1x2, 2x2 agree; losses", [float(r["loss"]) for r in ref])
PY
done
for f in loss.png panel.png checkpoint/index.json; do [ -s "$dir/vit_2x2/$f" ] || fail "vit 2x2: no $f"; done
grep -q "validation relative L2 (darcy, 4 samples)" "$dir/vit_2x2.log" || fail "vit: no final validation line"

# The GeoTransolver under zero3 (its context builder, preprocess Mlp and GALE blocks gathered one at a time) on
# 2x2: the 1x1 run's losses and validation relative L2. shardrt-plan does not model zero3, so no --check here.
z="$dir/geo_zero3"
mpi 4 "$train" --config "$dir/geotransolver.json" --set log.out_dir="$z" --set mesh.ddp=2 --set mesh.domain=2 \
    --set optimizer.mode=zero3 >"$z.log" || fail "geotransolver zero3 on 2x2 failed: $(cat "$z.log")"
python3 - "$dir/geotransolver_1x1/metrics.csv" "$z/metrics.csv" <<'PY'
import csv, sys
ref, got = (list(csv.DictReader(open(p))) for p in sys.argv[1:])
if len(got) != len(ref):
    sys.exit(f"models_cli: geotransolver zero3: {len(got)} rows in metrics.csv, expected {len(ref)}")
for a, b in zip(ref, got):
    for col in ("loss", "val_rel_l2"):
        if a[col] == "" and b[col] == "":
            continue
        x, y = float(a[col]), float(b[col])
        if not (x == x and x > 0 and abs(x - y) <= 1e-10 * abs(x)):
            sys.exit(f"models_cli: geotransolver zero3 step {a['step']} {col}: {x!r} on 1x1 vs {y!r} on 2x2 zero3")
print("geotransolver: zero3 on 2x2 equals 1x1; losses", [float(r["loss"]) for r in got])
PY

# The GeoTransolver stopped after step 1 and resumed: the uninterrupted 2x2 run's losses, bit for bit.
g="$dir/geo_resume"
mpi 4 "$train" --config "$dir/geotransolver.json" --set log.out_dir="$g" --set mesh.ddp=2 --set mesh.domain=2 \
    --stop-after 1 >"$g.1.log"
mpi 4 "$train" --config "$dir/geotransolver.json" --set log.out_dir="$g" --set mesh.ddp=2 --set mesh.domain=2 \
    --resume >"$g.2.log"
grep -q "resumed at step 1" "$g.2.log" || fail "geotransolver: no resume message: $(cat "$g.2.log")"
cmp -s <(cut -d, -f1-4,8 "$dir/geotransolver_2x2/metrics.csv") <(cut -d, -f1-4,8 "$g/metrics.csv") ||
    fail "geotransolver: the resumed run differs from the uninterrupted one"

# The plan on uneven splits, FLARE, and the memory-floor optimizer mode.
run vit 1 3 --set steps=1 --set validation.every=0
run flare 1 3 --set steps=1 --set validation.every=0
run flare 2 2 --set steps=1 --set validation.every=0
TAG=_mesh run vit 2 2 --set steps=1 --set validation.every=0 --set optimizer.mode=mesh
grep -q "mesh planned" "$dir/vit_2x2_mesh.plan" || fail "optimizer.mode=mesh: no all_gather over the mesh planned"
cat "$dir/flare_1x3.plan" | tail -4
echo "models_cli: all checks passed"
