#!/usr/bin/env bash
# tools/device-check and shardrt-bench-gpu on a machine that shows them no GPU (CUDA_VISIBLE_DEVICES empty, so
# this runs the same on a GPU host): both must say "no GPU: skipped", exit 0, and the check must leave its report.
# Usage: device_check_skip.sh <source root> <shardrt-bench-gpu>
set -u
root="$1" bench="$2"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "device_check_skip: $*" >&2; exit 1; }

got=$(CUDA_VISIBLE_DEVICES= OUT="$out" "$root/tools/device-check" 2>&1) || fail "device-check exited $? ($got)"
[[ "$got" == *"no GPU: skipped"* ]] || fail "device-check did not say 'no GPU: skipped': $got"
grep -q "no GPU: skipped" "$out/report.md" || fail "report.md lacks the skip line: $(cat "$out/report.md")"

got=$(CUDA_VISIBLE_DEVICES= "$bench" 2>&1) || fail "shardrt-bench-gpu exited $? ($got)"
[ "$got" = "no GPU: skipped" ] || fail "shardrt-bench-gpu printed '$got', not 'no GPU: skipped'"
# A bad option is still a usage error, before the GPU test.
CUDA_VISIBLE_DEVICES= "$bench" --no-such-option >/dev/null 2>&1 && fail "shardrt-bench-gpu accepted --no-such-option"
echo "device_check_skip: ok"
