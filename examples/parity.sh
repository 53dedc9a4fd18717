#!/usr/bin/env bash
# Runs an in-situ training example on 1..MAX ranks and checks that its "final loss <value>" line is the same on
# every rank count as on one rank (the serial computation), to a relative TOLERANCE: a decomposition may change
# nothing but the order of floating-point sums. With --reference, the 1-rank value must also equal that of another
# program on 1 rank (the same physics written in another language, on another decomposition).
#   parity.sh TOLERANCE MAX_RANKS [--reference PROGRAM] MPIEXEC [MPIEXEC FLAGS...] -- PROGRAM [ARGS...]
set -euo pipefail
tol="$1" max="$2"
shift 2
reference=""
if [ "$1" = "--reference" ]; then reference="$2"; shift 2; fi
launcher=()
while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
shift
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

final_loss() {  # <name> <ranks> <program> [args...]: prints the value, keeps the log
  local name="$1" n="$2"
  shift 2
  if ! timeout -k 5 120 "${launcher[@]}" -n "$n" "$@" >"$out/$name.log" 2>&1 </dev/null; then
    cat "$out/$name.log" >&2
    echo "parity.sh: $(basename "$1") failed on $n ranks" >&2
    return 1
  fi
  local v
  v="$(sed -n 's/^final loss *//p' "$out/$name.log")"
  [ -n "$v" ] || { cat "$out/$name.log" >&2; echo "parity.sh: no 'final loss' line on $n ranks" >&2; return 1; }
  echo "$v"
}
same() {  # <a> <b> <what>
  awk -v a="$1" -v b="$2" -v tol="$tol" -v what="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; s = b < 0 ? -b : b;
    ok = d <= tol * s; printf "parity: %s: %s vs %s, relative difference %.2e %s\n", what, a, b, (s > 0 ? d / s : d),
    ok ? "ok" : "> " tol; exit !ok }'
}

serial="$(final_loss n1 1 "$@")"
cat "$out/n1.log"
status=0
for n in $(seq 2 "$max"); do
  v="$(final_loss "n$n" "$n" "$@")" || { status=1; continue; }
  same "$v" "$serial" "$(basename "$1") on $n ranks vs 1" || status=1
done
if [ -n "$reference" ]; then
  r="$(final_loss ref 1 $reference)" || exit 1
  same "$serial" "$r" "$(basename "$1") vs $(basename "${reference%% *}")" || status=1
fi
exit $status
