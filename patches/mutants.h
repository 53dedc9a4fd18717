// Patch mutants: deliberate, known-wrong variants of a few patch steps, so the tests can show that check_sharded
// catches each bug class (issue 9): a parity suite that passes with a mutant switched on cannot see that bug.
//
// SHARDRT_MUTANT(name) is the literal constant `false` in every normal build, so the installed library holds no
// mutant code path (the compiler drops the dead branch; the name is not even looked at). Only the test build that
// compiles the patches sources a second time with -DSHARDRT_PATCH_MUTANTS (tests/meson.build, the test_mutants
// executable) turns it into a read of one process-wide selector, which a test sets with MutantScope. One mutant is
// active at a time; Mutant::none is the correct code. Internal: not installed.
#pragma once

namespace shardrt::patch {

enum class Mutant {
  none,
  halo_drop_received_grads,   // halo backward: the grads of the slices a rank lent its neighbours are dropped
  ring_reuse_first_kv_block,  // ring attention backward: every step's block grads computed on the rank's own K/V
  ring_local_lse,             // ring attention backward: the LSE of the rank's own keys instead of the global one
  ring_skip_dkdv_home_hop,    // ring attention backward: the dK/dV accumulators stop one hop short of their owner
  norm_skip_stat_reduction,   // sharded norm backward: the sum of g*gamma*xhat is not reduced over the stat axes
};

#ifdef SHARDRT_PATCH_MUTANTS

// The selector: one per process (each MPI rank sets the same one).
inline Mutant& active_mutant() {
  static Mutant m = Mutant::none;
  return m;
}

// Switches `m` on for its lifetime, back to none after (also when a check throws).
struct MutantScope {
  explicit MutantScope(Mutant m) { active_mutant() = m; }
  ~MutantScope() { active_mutant() = Mutant::none; }
  MutantScope(const MutantScope&) = delete;
  MutantScope& operator=(const MutantScope&) = delete;
};

#define SHARDRT_MUTANT(name) (::shardrt::patch::active_mutant() == ::shardrt::patch::Mutant::name)

#else

#define SHARDRT_MUTANT(name) false

#endif

}  // namespace shardrt::patch
