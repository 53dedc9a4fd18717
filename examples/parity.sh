#!/usr/bin/env bash
# Runs an in-situ training example on 1..MAX ranks and checks that its losses ("loss <step> <value>" lines) are
# the same on every rank count as on one rank, the serial computation, to a relative TOLERANCE: a decomposition
# must change nothing but the order of floating-point sums.
#   parity.sh TOLERANCE MAX_RANKS MPIEXEC [MPIEXEC FLAGS...] -- PROGRAM [ARGS...]
set -euo pipefail
tol="$1" max="$2"
shift 2
launcher=()
while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
shift
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for n in $(seq 1 "$max"); do
  if ! timeout -k 5 120 "${launcher[@]}" -n "$n" "$@" >"$out/$n.log" 2>&1 </dev/null; then
    cat "$out/$n.log"
    echo "parity.sh: $(basename "$1") failed on $n ranks" >&2
    exit 1
  fi
  grep '^loss ' "$out/$n.log" >"$out/$n.loss" || true
  [ -s "$out/$n.loss" ] || { cat "$out/$n.log"; echo "parity.sh: no loss lines on $n ranks" >&2; exit 1; }
done
cat "$out/1.log"
status=0
for n in $(seq 2 "$max"); do
  paste -d' ' "$out/1.loss" "$out/$n.loss" | awk -v tol="$tol" -v n="$n" '
    function abs(x) { return x < 0 ? -x : x }
    { if (NF != 6 || $2 != $5) { print "parity.sh: the loss lines differ in number on " n " ranks"; bad = 1; next }
      d = abs($3 - $6); s = abs($3) > abs($6) ? abs($3) : abs($6);
      if (d > tol * s) { printf "parity.sh: step %s: %s on 1 rank, %s on %d ranks (rel %.2e > %s)\n", $2, $3, $6, n, d / s, tol; bad = 1 }
      if (d / (s > 0 ? s : 1) > worst) worst = d / (s > 0 ? s : 1) }
    END { printf "parity: %d ranks vs 1: %d steps, max relative difference %.2e\n", n, NR, worst; exit bad }' ||
    status=1
  [ "$(wc -l <"$out/1.loss")" = "$(wc -l <"$out/$n.loss")" ] || { echo "parity.sh: step counts differ"; status=1; }
done
exit $status
