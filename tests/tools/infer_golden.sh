#!/usr/bin/env bash
# shardrt-infer on PhysicsNeMo's goldens, as the README runs it:
#   infer_golden.sh RANKS MESH MODEL CASE WEIGHTS-FILE SHARDRT-INFER COMPARE-OUTPUTS DATA-DIR
# runs MODEL in f64 under mpiexec with the golden CASE's config, the weights (safetensors, .mdlus or .pt), its inputs
# and grad_output, then compares the output, the input grads and every parameter grad with PhysicsNeMo's (1e-9).
set -euo pipefail
ranks="$1" mesh="$2" model="$3" case="$4" weights="$5" infer="$6" compare="$7" data="$8"
out="$(mktemp --suffix=.safetensors)"
trap 'rm -f "$out"' EXIT
g="$data/golden"
mpiexec -n "$ranks" "$infer" --model "$model" --config "$g/$case.config.json" --weights "$g/$weights" \
  --inputs "$g/$case.inputs.safetensors" --grad-output "$g/$case.grad_output.safetensors" --output "$out" \
  --mesh "$mesh" --dtype f64
"$compare" "$out" "$g/$case.safetensors" 1e-9
