#!/usr/bin/env bash
# tools/demo as a user runs it with its output sent to a file (`tools/demo > log`), shortened to a few steps:
#   1. the log holds no carriage return and no escape sequence (plain lines: the progress bar is for terminals);
#   2. the fp64 parity check at the start passed, and the run ends by naming the best checkpoint;
#   3. shardrt-train --eval of that checkpoint on the validation split gives the relative L2 the run recorded for it,
#      and writes its panel;
#   4. on a terminal (the same training under script(1), which gives mpiexec a pseudo-terminal) the bar is drawn,
#      so check 1 can fail.
#   demo_log.sh ROOT BUILD
set -euo pipefail
root=$1 build=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/shardrt_demo_log.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
fail() { echo "demo_log: $*" >&2; [ -f "$dir/log" ] && tail -n 20 "$dir/log" >&2; exit 1; }

# 1-2. The demo, redirected. Its defaults, fewer steps.
short=(--set steps=24 --set log.every=8 --set validation.every=8 --set checkpoint.every=0)
SHARDRT_BUILD_DIR="$build" SHARDRT_DEMO_DIR="$dir" "$root/tools/demo" "${short[@]}" >"$dir/log" 2>&1 ||
  fail "tools/demo failed"
grep -q $'\r' "$dir/log" && fail "the redirected log holds a carriage return"
grep -q $'\033' "$dir/log" && fail "the redirected log holds an escape sequence"
grep -q "the sharded run matches the serial run" "$dir/log" || fail "no passed parity line"
# shardrt-train's last line names the best checkpoint, and so does the demo's own last line.
best_line=$(grep "^best checkpoint: " "$dir/log" | tail -n 1)
[[ "$best_line" == "best checkpoint: $dir/run/checkpoint-best (step "* ]] || fail "no line naming the best checkpoint"
[ "$(grep -A1 "^best checkpoint: " "$dir/log" | tail -n 1 | cut -c1-8)" = "== done " ] ||
  fail "shardrt-train's last line is not the best checkpoint's"
last=$(tail -n 1 "$dir/log")
[[ "$last" == *"best checkpoint $dir/run/checkpoint-best"* ]] || fail "the demo's last line does not name the best checkpoint: '$last'"
[ -s "$dir/run/panel.png" ] && [ -s "$dir/run/loss.png" ] || fail "panel.png or loss.png missing"

# 3. --eval of the best checkpoint: the same figure the run recorded for it (the demo validates on the whole split).
best=$(sed -E 's/.*validation relative L2 ([0-9.]+)\)$/\1/' <<<"$best_line")
source "$root/tools/env.sh"
export OMP_NUM_THREADS=1
# The command the demo's last line prints, as printed (its panel goes next to the run's).
mpiexec -n 4 --oversubscribe --bind-to none "$build/tools/shardrt-train" --config "$dir/run/config.json" --eval \
    >"$dir/eval.log" 2>&1 || { cat "$dir/eval.log" >&2; fail "--eval failed"; }
got=$(sed -nE 's/^relative L2 \(darcy, [0-9]+ samples\): ([0-9.]+)$/\1/p' "$dir/eval.log")
[ "$got" = "$best" ] || { cat "$dir/eval.log" >&2; fail "--eval gave '$got', the run recorded $best for its best checkpoint"; }
[ -s "$dir/run/eval-panel.png" ] || fail "--eval wrote no eval-panel.png"

# 4. On a terminal the bar is drawn (log lines only every 100 steps here, the bar between them).
command -v script >/dev/null || { echo "demo_log: script(1) missing, terminal check skipped"; exit 0; }
script -qec "mpiexec -n 1 '$build/tools/shardrt-train' --config '$dir/run/config.json' --set mesh.ddp=1 \
    --set mesh.domain=1 --set steps=30 --set log.every=100 --set validation.every=0 --set log.plots=false \
    --set log.out_dir='$dir/tty'" "$dir/tty.log" >/dev/null || fail "the terminal run failed"
grep -q $'\r\[#' "$dir/tty.log" || fail "no progress bar on a terminal"
echo "demo_log: redirected log plain, best checkpoint named and equal under --eval ($got), bar on a terminal"
