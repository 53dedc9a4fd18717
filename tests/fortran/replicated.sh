#!/bin/sh
# tests/fortran/test_fortran_replicated on N ranks: the goldens it compares with (flare_time_insitu, vit2d) are
# first written as raw fp64 files by golden_raw.py into a scratch folder.
# Usage: replicated.sh <tests/mpirun.sh> <test_fortran_replicated> <N> <tests/data/golden>
set -eu
mpirun="$1" exe="$2" n="$3" golden="$4"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
here="$(dirname "$0")"
python3 "$here/golden_raw.py" "$golden/flare_time_insitu.safetensors" "$work/flare"
python3 "$here/golden_raw.py" "$golden/vit2d.safetensors" "$work/vit"
"$mpirun" "$n" "$exe" "$golden" "$work/flare" "$work/vit"
