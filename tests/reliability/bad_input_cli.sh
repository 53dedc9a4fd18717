#!/usr/bin/env bash
# The bad-input matrix, command-line part (docs/reliability.md, "Bad input"): every row of bad_input_cli.tsv runs one
# tool with input it must refuse, and passes when
#   - it ends within its time limit (a hang fails) and without a crash (no signal, no "terminate called", no abort);
#   - EVERY rank exits with the expected status (each rank's own exit code is recorded by a wrapper, not mpiexec's);
#   - stderr, all ranks' lines together, matches the row's extended regex;
#   - none of the row's "absent" paths exists afterwards (globs allowed; no partial output left as if complete).
# Table columns (tab-separated; '#' lines are comments): id, batch, category, ranks, exit, regex, absent, command
# ('-' for no regex / no absent paths).
#   ranks: 0 runs the command directly (a program without MPI); N >= 1 under mpiexec -n N.
#   batch: rows of one batch run concurrently (mpiexec's start-up dominates), batches one after another, so a row
#   may read what an earlier batch left (the checkpoint a NaN run kept).
#   category "check" marks a follow-up assertion on an earlier row's files, not a bad-input case of its own.
# Usage: bad_input_cli.sh TABLE MPIEXEC GOLDEN-DIR TOOLS-DIR   (TOOLS-DIR: build/tools; a missing benchmark program
#        skips its rows, as in the CPU-only CI configuration, which leaves the benchmarks out)
set -uo pipefail
table=$1 mpiexec=$2 golden=$3 tools=$4
D=$(mktemp -d "${TMPDIR:-/tmp}/shardrt_bad_input_cli.XXXXXX")
trap 'rm -rf "$D"' EXIT
export D G="$golden" TRAIN="$tools/shardrt-train" INFER="$tools/shardrt-infer" GEN="$tools/shardrt-darcy-gen" \
       PLOT="$tools/shardrt-plot-darcy" PLAN="$tools/shardrt-plan" BENCH="$tools/shardrt-bench"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 SHARDRT_COMM_CHECK=1 SHARDRT_COMM_TIMEOUT=${SHARDRT_COMM_TIMEOUT:-10}
limit=${BAD_INPUT_ROW_LIMIT:-40}
parallel=${BAD_INPUT_PARALLEL:-6}

# ---- fixtures: a tiny Darcy set, a FLARE config, and the broken variants the rows name --------------------------
"$GEN" --out "$D/data" --mode exact --resolution 8 --train 4 --val 2 --seed 3 >/dev/null || exit 1
cat > "$D/tiny.json" <<JSON
{"model": {"kind": "flare", "seed": 5,
           "args": {"functional_dim": 1, "out_dim": 1, "n_layers": 1, "n_hidden": 8, "n_head": 2, "mlp_ratio": 2,
                    "slice_num": 4, "unified_pos": true, "ref": 2, "structured_shape": [8, 8]}},
 "precision": "f64",
 "optimizer": {"algorithm": "adamw", "lr": 3e-3},
 "data": {"train": "$D/data/darcy_train.json", "val": "$D/data/darcy_val.json", "batch_size": 2, "seed": 9},
 "steps": 2, "log": {"every": 1, "plots": false, "progress_bar": "off", "out_dir": "$D/out"}}
JSON
printf '{"model": {"kind": "flare",' > "$D/not_json.json"
python3 - "$D" <<'PY' || exit 1
import json, os, shutil, struct, sys
d = sys.argv[1]
tiny = json.load(open(f"{d}/tiny.json"))
def write(name, doc):
    json.dump(doc, open(f"{d}/{name}", "w"))
bad = json.loads(json.dumps(tiny)); bad["optimizer"]["lrr"] = 1; write("unknown_key.json", bad)
bad = json.loads(json.dumps(tiny)); bad["steps"] = "ten"; write("ill_typed.json", bad)
bad = json.loads(json.dumps(tiny)); del bad["data"]; write("no_data.json", bad)
bad = json.loads(json.dumps(tiny)); bad["model"]["args"]["n_hidden"] = "eight"; write("bad_model_arg.json", bad)
# The ViT on the same data, for "a checkpoint of another model".
vit = json.loads(json.dumps(tiny))
vit["model"] = {"kind": "vit", "seed": 5, "args": {"img_size": [8, 8], "patch_size": 4, "in_channels": 1,
                "num_classes": 64, "embed_dim": 8, "num_heads": 2, "depth": 1, "mlp_ratio": 2.0}}
vit["steps"] = 1; vit["log"]["out_dir"] = f"{d}/vit_out"; write("vit.json", vit)
# Data: a training shard cut short, and one with a NaN in sample 0's pressure.
for variant in ("data_cut", "data_nan"):
    shutil.copytree(f"{d}/data", f"{d}/{variant}")
    m = json.load(open(f"{d}/{variant}/darcy_train.json"))
    m["shards"] = [dict(s) for s in m["shards"]]
shard = f"{d}/data_cut/darcy_train_000.safetensors"
raw = open(shard, "rb").read(); open(shard, "wb").write(raw[: len(raw) // 2])
shard = f"{d}/data_nan/darcy_train_000.safetensors"
raw = bytearray(open(shard, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]; header = json.loads(raw[8:8 + n])
lo, hi = header["darcy"]["data_offsets"]
assert header["darcy"]["dtype"] == "F32"
raw[8 + n + lo + 4 * 9:8 + n + lo + 4 * 10] = struct.pack("<f", float("nan"))
open(shard, "wb").write(raw)
# Weights: the ViT golden cut in half.
g = os.environ["G"]
w = open(f"{g}/vit2d.weights.safetensors", "rb").read()
open(f"{d}/vit2d_cut.safetensors", "wb").write(w[: len(w) // 2])
# A prediction for the plot (8 x 8 pressure) and the same cut short; a measure JSON cut short for shardrt-plan.
pred_header = json.dumps({"darcy": {"dtype": "F32", "shape": [8, 8], "data_offsets": [0, 256]}}).encode()
pred_header += b" " * (-len(pred_header) % 8)
pred = struct.pack("<Q", len(pred_header)) + pred_header + b"\0" * 256
open(f"{d}/pred.safetensors", "wb").write(pred)
open(f"{d}/pred_cut.safetensors", "wb").write(pred[: len(pred) - 100])
open(f"{d}/measure_cut.json", "w").write('{"ranks": [{"peak_bytes": 12')
open(f"{d}/afile", "w").write("a regular file: nothing can be created under it\n")
vit_cfg = json.load(open(f"{g}/vit2d.config.json")); vit_cfg["patch_sise"] = 4; write("vit_bad_key.json", vit_cfg)
# After the diverging run: the CSV holds the steps before the NaN and no more, and the checkpoint kept is the last
# step's before it, complete (its index names every file, each of the length it states).
open(f"{d}/check_nan_run.py", "w").write("""
import csv, json, os, re, sys
err, out = sys.argv[1], sys.argv[2]
nan_step = int(re.search(r"at step ([0-9]+)", open(err).read()).group(1))
rows = list(csv.DictReader(open(os.path.join(out, "metrics.csv"))))
steps = [int(r["step"]) for r in rows]
if steps != list(range(1, nan_step)):
    sys.exit(f"metrics.csv holds steps {steps}, not 1..{nan_step - 1} (the NaN came at step {nan_step})")
index = json.load(open(os.path.join(out, "checkpoint", "index.json")))
if index["state"]["train"]["step"] != nan_step - 1:
    sys.exit(f"the checkpoint is of step {index['state']['train']['step']}, not {nan_step - 1}")
for f in index["files"]:
    path = os.path.join(out, "checkpoint", f["name"] if isinstance(f, dict) else f)
    if not os.path.exists(path):
        sys.exit(f"the checkpoint lacks {path}")
print(f"NaN at step {nan_step}: metrics.csv and the checkpoint stop at step {nan_step - 1}")
""")
PY
"$GEN" --out "$D/data16" --mode exact --resolution 16 --train 1 --val 1 --seed 3 >/dev/null || exit 1

# ---- the rows -------------------------------------------------------------------------------------------------
crash='Segmentation fault|core dumped|terminate called|Aborted|MPI_ABORT|exited on signal|Killed|killed by signal'
run_row() {  # id category ranks exit regex absent command; prints "ok <id>" or "FAIL <id>: why"
  local id=$1 category=$2 ranks=$3 want=$4 regex=$5 absent=$6 cmd=$7 out="$D/rows/$1" why=""
  mkdir -p "$out"
  # The wrapper records the rank's own status and exits 0, so that mpiexec, which kills the other ranks as soon as
  # one exits non-zero, lets every rank finish and report.
  printf '%s\necho "__exit=$?" >&2\n' "$cmd" > "$out/row.sh"
  local start=$SECONDS
  local rc
  if [ "$ranks" = 0 ]; then
    timeout -k 5 "$limit" bash "$out/row.sh" >"$out/stdout" 2>"$out/stderr" </dev/null
    rc=$?
  else
    timeout -k 5 "$limit" "$mpiexec" --tag-output -n "$ranks" --bind-to none bash "$out/row.sh" >"$out/stdout" \
        2>"$out/stderr" </dev/null
    rc=$?
  fi
  # Each rank's lines without mpiexec's "[1,r]<stderr>:" tag, and each rank's own exit code.
  sed -E 's/^\[[0-9]+,[0-9]+\]<std(err|out)>://' "$out/stderr" | grep -v '^__exit=' > "$out/err"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    why="no answer within ${limit} s (a hang)"
  elif grep -Eq "$crash" "$out/stderr" "$out/stdout"; then
    why="crashed: $(grep -Em1 "$crash" "$out/stderr" "$out/stdout")"
  else
    local r codes
    for ((r = 0; r < (ranks == 0 ? 1 : ranks); ++r)); do
      if [ "$ranks" = 0 ]; then codes=$(grep -o '^__exit=[0-9]*' "$out/stderr" | cut -d= -f2)
      else codes=$(grep -o "^\[[0-9]*,$r\]<stderr>:__exit=[0-9]*" "$out/stderr" | cut -d= -f2); fi
      [ "$codes" = "$want" ] || { why="rank $r exited ${codes:-(no exit recorded)}, expected $want"; break; }
    done
    if [ -z "$why" ] && [ "$regex" != "-" ] && ! grep -Eq -- "$regex" "$out/err"; then
      why="stderr does not match /$regex/"
    fi
    if [ -z "$why" ] && [ "$absent" != "-" ]; then
      local p
      for p in $(eval echo "${absent//,/ }"); do
        [ -e "$p" ] && { why="left $p behind"; break; }
      done
    fi
  fi
  if [ -z "$why" ]; then echo "ok $id $((SECONDS - start)) s"; else
    echo "FAIL $id [$category, $ranks rank(s)]: $why"
    echo "    command: $cmd"; sed 's/^/    | /' "$out/err" | head -8
  fi
}
export -f run_row
export crash limit mpiexec

rows=0 cases=0 skipped=0
declare -A batch_rows
while IFS=$'\t' read -r id batch category ranks want regex absent cmd; do
  [[ -z "$id" || "$id" == \#* ]] && continue
  # A benchmark that this configuration did not build: its rows are skipped (and counted as such).
  if [[ "$cmd" =~ \$BENCH-([a-z]+) ]] && [ ! -x "$BENCH-${BASH_REMATCH[1]}" ]; then skipped=$((skipped + 1)); continue; fi
  rows=$((rows + 1))
  [ "$category" = check ] || cases=$((cases + 1))
  batch_rows[$batch]+="$id"$'\x1f'"$category"$'\x1f'"$ranks"$'\x1f'"$want"$'\x1f'"$regex"$'\x1f'"$absent"$'\x1f'"$cmd"$'\x1e'
done < "$table"

failed=0
for batch in $(printf '%s\n' "${!batch_rows[@]}" | sort -n); do
  results=$(printf '%s' "${batch_rows[$batch]}" | tr '\036' '\0' |
            xargs -0 -P "$parallel" -I{} bash -c 'IFS=$'"'"'\x1f'"'"' read -r a b c d e f g <<<"$1"; run_row "$a" "$b" "$c" "$d" "$e" "$f" "$g"' _ {})
  printf '%s\n' "$results" | grep -v '^ok ' || true
  [ -n "${BAD_INPUT_VERBOSE:-}" ] && printf '%s\n' "$results" | grep '^ok ' 
  failed=$((failed + $(printf '%s\n' "$results" | grep -c '^FAIL')))
done
echo "bad_input_cli: $cases bad-input cases and $((rows - cases)) follow-up checks run, $skipped rows skipped (benchmarks not built); $failed failed"
[ "$failed" = 0 ]
