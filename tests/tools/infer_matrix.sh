#!/usr/bin/env bash
# shardrt-infer never waits out the collective deadline on a valid input: every case on every mesh, each run under
# a 60 s limit (the suite's deadline is 120 s), with batches smaller than, equal to and larger than the mesh's ddp
# size (a ddp group without a sample, uneven groups), the output, every input grad and every parameter grad
# against the same case on one rank (1e-10 relative, tests/tools/compare_outputs.cpp).
#   infer_matrix.sh INFER COMPARE BATCH_INPUTS DATA-DIR "MESHES" "BATCHES" MODEL:CASE...
# MESHES e.g. "1x3 2x1 2x2 2x3", BATCHES e.g. "1 3"; CASE a golden of DATA-DIR/golden (its config, weights,
# inputs and grad_output, taken to each batch by batch_inputs).
set -euo pipefail
infer=$1 compare=$2 batch=$3 data=$4 meshes=$5 batches=$6
shift 6
dir=$(mktemp -d "${TMPDIR:-/tmp}/shardrt_infer_matrix.XXXXXX")
trap 'rm -rf "$dir"' EXIT
g="$data/golden"
runs=0
for spec in "$@"; do
  model=${spec%%:*} case=${spec#*:}
  for b in $batches; do
    "$batch" "$g/$case.inputs.safetensors" "$dir/in.safetensors" "$b"
    "$batch" "$g/$case.grad_output.safetensors" "$dir/grad.safetensors" "$b"
    args=(--model "$model" --config "$g/$case.config.json" --weights "$g/$case.weights.safetensors"
          --inputs "$dir/in.safetensors" --grad-output "$dir/grad.safetensors" --dtype f64)
    mpiexec -n 1 "$infer" "${args[@]}" --mesh 1x1 --output "$dir/ref.safetensors" >"$dir/log" 2>&1 ||
      { cat "$dir/log"; echo "infer_matrix: $case batch $b failed on one rank" >&2; exit 1; }
    for mesh in $meshes; do
      ranks=$(( ${mesh%x*} * ${mesh#*x} ))
      rc=0
      start=$SECONDS
      timeout -k 5 60 mpiexec -n "$ranks" --oversubscribe --bind-to none "$infer" "${args[@]}" --mesh "$mesh" \
        --output "$dir/out.safetensors" >"$dir/log" 2>&1 </dev/null || rc=$?
      if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        cat "$dir/log"; echo "infer_matrix: $case batch $b on $mesh waited past 60 s" >&2; exit 1
      fi
      [ $rc -eq 0 ] || { cat "$dir/log"; echo "infer_matrix: $case batch $b on $mesh failed (exit $rc)" >&2; exit 1; }
      "$compare" "$dir/out.safetensors" "$dir/ref.safetensors" 1e-10 >"$dir/cmp" ||
        { cat "$dir/cmp"; echo "infer_matrix: $case batch $b on $mesh differs from one rank" >&2; exit 1; }
      worst=$(awk '$2 == "rel" && $3 > w {w = $3} END {printf "%.1e", w + 0}' "$dir/cmp")
      echo "$case batch $b on $mesh: $(tail -n 1 "$dir/cmp"), max rel $worst, $((SECONDS - start)) s"
      runs=$((runs + 1))
    done
  done
done
echo "infer_matrix: $runs runs, every one within 60 s and equal to one rank"
