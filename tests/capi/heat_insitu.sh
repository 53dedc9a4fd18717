#!/bin/sh
# examples/c/heat_insitu under N ranks: it must succeed (it checks its own ledger: no field gathered) and, for N > 1,
# end with the same training loss as the 1-rank run, to round-off (fp64: the domain-parallel FLARE is the serial one).
# Usage: heat_insitu.sh <tests/mpirun.sh> <heat_insitu> <N>
set -eu
mpirun="$1" exe="$2" n="$3"
final_loss() {
  out=$("$mpirun" "$1" "$exe" 40 3) || { echo "$out"; echo "heat_insitu failed on $1 ranks" >&2; exit 1; }
  echo "$out" >&2
  echo "$out" | sed -n 's/^final loss //p'
}
mine=$(final_loss "$n")
[ -n "$mine" ] || { echo "no 'final loss' line on $n ranks" >&2; exit 1; }
[ "$n" = 1 ] && exit 0
serial=$(final_loss 1)
awk -v a="$mine" -v b="$serial" -v n="$n" 'BEGIN { d = a - b; if (d < 0) d = -d; s = b < 0 ? -b : b;
  if (d <= 1e-10 * s) { printf "final loss %s on %s ranks = %s on 1 rank (|diff| %.3g)\n", a, n, b, d; exit 0 }
  printf "final loss %s on %s ranks differs from %s on 1 rank by %.3g\n", a, n, b, d; exit 1 }' >&2
