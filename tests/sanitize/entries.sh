# Sourced by tools/test --sanitize and tools/soak --suite: the ctest entries of a build, run one at a time.
#   suite_entries BUILD [CTEST ARGS...]   the names of the entries ctest would run with those arguments (-R, -L,
#                                         -LE), in its order
#   run_entry BUILD NAME LOG              runs that entry alone under ctest (its limit, environment and labels as
#                                         registered), its output into LOG; returns ctest's status
suite_entries() {
  local build=$1
  shift
  ctest --test-dir "$build" -N "$@" | sed -n 's/^ *Test *#[0-9]*: \([^ ]*\).*/\1/p'
}

run_entry() {
  local build=$1 name=$2 log=$3
  ctest --test-dir "$build" --output-on-failure -R "^${name}\$" >"$log" 2>&1
}
