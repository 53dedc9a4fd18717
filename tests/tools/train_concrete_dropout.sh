#!/usr/bin/env bash
# shardrt-train on a GeoTransolver with concrete dropout (tiny Darcy set, 16 x 16, fp64): training mode draws the
# relaxed Bernoulli masks, so every p_logit gets a grad and moves.
#   1. three AdamW steps on 1x1, 1x2, 2x1 and 2x2: the domain split changes nothing, 1x2 has 1x1's losses at every
#      step and 2x2 has 2x1's (1e-10 relative: the masks are keyed by the forward's step and the global element, so
#      a sharded forward draws the serial one's masks; the ddp size changes the micro-batches, hence the draws);
#      validation in eval mode;
#   2. in each run's checkpoint every p_logit (the geometry tokenizer's and each block's Attn.out_dropout,
#      attn_dropout and ffn_dropout) has left its initial value log(0.1 / 0.9) and has a nonzero AdamW moment.
#   train_concrete_dropout.sh GEN TRAIN MPIEXEC
set -euo pipefail
gen=$1 train=$2 mpiexec=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/shardrt_concrete.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "train_concrete_dropout: $*" >&2; exit 1; }

"$gen" --out "$dir/data" --mode exact --resolution 16 --train 4 --val 2 --seed 3 >/dev/null
cat > "$dir/geo.json" <<JSON
{"model": {"kind": "geotransolver", "seed": 5, "args": {"functional_dim": 3, "out_dim": 1, "geometry_dim": 2,
   "n_layers": 2, "n_hidden": 16, "n_head": 2, "mlp_ratio": 2, "slice_num": 4, "concrete_dropout": true,
   "dropout": 0.1}},
 "precision": "f64", "optimizer": {"algorithm": "adamw", "lr": 1e-2, "weight_decay": 0},
 "loss": {"kind": "relative_l2"},
 "data": {"train": "$dir/data/darcy_train.json", "val": "$dir/data/darcy_val.json", "batch_size": 2, "seed": 9},
 "steps": 3, "log": {"every": 1, "plots": false, "progress_bar": "off"}, "validation": {"every": 3}}
JSON
for mesh in 1x1 1x2 2x1 2x2; do
  d=${mesh%x*} n=${mesh#*x}
  "$mpiexec" -n $((d * n)) --oversubscribe --bind-to none "$train" --config "$dir/geo.json" \
      --set log.out_dir="$dir/$mesh" --set mesh.ddp=$d --set mesh.domain=$n >"$dir/$mesh.log" ||
      fail "$mesh failed: $(cat "$dir/$mesh.log")"
done
python3 - "$dir" <<'PY'
import csv, json, math, struct, sys
base = sys.argv[1]
runs = {m: list(csv.DictReader(open(f"{base}/{m}/metrics.csv"))) for m in ("1x1", "1x2", "2x1", "2x2")}
ref = runs["1x1"]
for serial, sharded in (("1x1", "1x2"), ("2x1", "2x2")):
    if len(runs[serial]) != 3 or runs[serial][-1]["val_rel_l2"] == "":
        sys.exit(f"train_concrete_dropout: {serial}: expected 3 rows in metrics.csv and a validation at step 3")
    for a, b in zip(runs[serial], runs[sharded]):
        x, y = float(a["loss"]), float(b["loss"])
        if not (x > 0 and abs(x - y) <= 1e-10 * x):
            sys.exit(f"train_concrete_dropout: step {a['step']}: loss {x!r} on {serial} but {y!r} on {sharded}")

def scalar(ckpt, key):
    """A 0-d f64 tensor of a ShardRT checkpoint (index.json names the rank file and the piece's key)."""
    index = json.load(open(f"{ckpt}/index.json"))
    piece = index["tensors"][key]["pieces"][0]
    with open(f"{ckpt}/{index['files'][piece['file']]['name']}", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        lo, hi = header[piece["key"]]["data_offsets"]
        f.seek(8 + n + lo)
        return struct.unpack("<d", f.read(hi - lo))[0]

init = math.log(0.1 / 0.9)
sites = ["context_builder.geometry_tokenizer.output_dropout"] + [
    f"blocks.{l}.{s}" for l in range(2) for s in ("Attn.out_dropout", "attn_dropout", "ffn_dropout")]
for m in runs:
    for site in sites:
        p = scalar(f"{base}/{m}/checkpoint", f"param.{site}.p_logit")
        v = scalar(f"{base}/{m}/checkpoint", f"exp_avg_sq.{site}.p_logit")
        if not (abs(p - init) > 1e-4 and v > 0):
            sys.exit(f"train_concrete_dropout: {m}: {site}.p_logit = {p!r} (init {init!r}), AdamW moment {v!r}")
print("train_concrete_dropout: 1x2 = 1x1, 2x2 = 2x1; losses", [float(r["loss"]) for r in ref],
      [float(r["loss"]) for r in runs["2x1"]])
print("  p_logit after 3 steps:", {s: round(scalar(f"{base}/1x1/checkpoint", f"param.{s}.p_logit"), 5) for s in sites},
      f"(init {init:.5f})")
PY
echo "train_concrete_dropout: all checks passed"
