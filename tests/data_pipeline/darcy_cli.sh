#!/usr/bin/env bash
# shardrt-darcy-gen and shardrt-plot-darcy as a user runs them: a set with train and val splits in several shards,
# the same seed giving byte-identical files, a bad setting refused with its reason, and the panel of a validation
# sample as a PNG of the asked size (its prediction the truth itself, so the printed error is 0).
#   darcy_cli.sh GEN PLOT
set -euo pipefail
gen=$1 plot=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/shardrt_darcy_cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "darcy_cli: $*" >&2; exit 1; }

"$gen" --out "$dir/a" --mode exact --resolution 16 --train 5 --val 2 --samples-per-shard 3 --seed 4 >/dev/null
"$gen" --out "$dir/b" --mode exact --resolution 16 --train 5 --val 2 --samples-per-shard 3 --seed 4 >/dev/null
for f in darcy_train_000.safetensors darcy_train_001.safetensors darcy_val_000.safetensors darcy_train.json \
         darcy_val.json; do
  [ -s "$dir/a/$f" ] || fail "missing $f"
  cmp -s "$dir/a/$f" "$dir/b/$f" || fail "$f differs between two runs with the same seed"
done
grep -q '"samples": 5' "$dir/a/darcy_train.json" || fail "the train manifest does not state 5 samples"

if "$gen" --out "$dir/c" --mode physicsnemo --resolution 20 --train 1 --val 0 2>"$dir/err"; then
  fail "physicsnemo mode accepted resolution 20"
fi
grep -q "multiple of 2^(nr_multigrids-1) = 8" "$dir/err" || fail "unexpected message: $(cat "$dir/err")"

out=$("$plot" --data "$dir/a/darcy_val.json" --sample 1 --prediction "$dir/a/darcy_val_000.safetensors" \
      --prediction-sample 1 --out "$dir/panel.png" --size 800x240)
echo "$out" | grep -q "relative L2 0$" || fail "expected a zero error, got: $out"
head=$(od -An -tx1 -N24 "$dir/panel.png" | tr -d ' \n')
[ "${head:0:16}" = "89504e470d0a1a0a" ] || fail "no PNG signature: $head"
[ "${head:32:16}" = "00000320000000f0" ] || fail "IHDR is not 800 x 240: ${head:32:16}"
echo "darcy_cli: ok"
