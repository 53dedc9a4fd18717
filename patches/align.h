// Operand alignment: two operands of one op sharded along the same dim by the same mesh axis, but with different
// per-rank extents (a caller decomposition next to the split rule, or two caller decompositions).
//
// Ops whose operands meet element for element (binary elementwise ops, cat, the losses) need the same rows on
// the same rank. Rather than refuse caller decompositions, they align: the second operand is redistributed to
// the first one's extents on every such axis — one all_to_all_v on that axis (patches/redistribute.cpp: ledger
// scope "redistribute", kind all_to_all_v, bytes = the elements of this rank's window that other ranks own under
// the first operand's extents, times the itemsize), and the output follows the first operand. Its adjoint is the
// reverse all_to_all_v (scope "redistribute.backward"), so the second operand's grad arrives in its own extents.
//
// Policy. A process-wide setting chooses between that and a strict mode in which such operands are a
// MissingShardPatch naming the op, both placements and both extents lists (no communication is issued). The
// default is ExtentMismatch::redistribute; SHARDRT_STRICT_EXTENTS=1 selects ExtentMismatch::raise ("0" or unset:
// redistribute; another value is a ValueError, as a rank reading it differently would issue a collective its
// peers do not). The setting is read by every rank on its own, so it MUST be the same on every rank: set the
// variable for the whole job, and call set_extent_mismatch with the same value on every rank, at the same point
// of the program.
#pragma once
#include "patches/shard_tensor.h"

namespace shardrt {

enum class ExtentMismatch {
  redistribute,  // the second operand goes to the first one's extents (one all_to_all_v per such axis)
  raise,         // MissingShardPatch naming the op, the placements and the extents
};

// The current policy: the last set_extent_mismatch, else SHARDRT_STRICT_EXTENTS (read on first use).
ExtentMismatch extent_mismatch();
void set_extent_mismatch(ExtentMismatch policy);

// Sets the policy for its lifetime and restores the previous one (tests, or one strict region of a program).
class ExtentMismatchScope {
 public:
  explicit ExtentMismatchScope(ExtentMismatch policy) : previous_(extent_mismatch()) { set_extent_mismatch(policy); }
  ~ExtentMismatchScope() { set_extent_mismatch(previous_); }
  ExtentMismatchScope(const ExtentMismatchScope&) = delete;
  ExtentMismatchScope& operator=(const ExtentMismatchScope&) = delete;

 private:
  ExtentMismatch previous_;
};

// Whether, on mesh axis `axis`, `other` has first's extents or could be given them: both Shard of corresponding
// dims — paired from the right, as broadcasting pairs them (the same dim when the ranks are equal) — with the same
// global size there. True as well when neither is Shard on the axis. A pure function of the specs.
bool extents_alignable(const ShardTensor& first, const ShardTensor& other, int axis);

// `other` with first's extents on every axis where extents_alignable holds and the extents differ (one
// all_to_all_v per such axis); `other` itself when there is none. Under ExtentMismatch::raise, any such axis is a
// MissingShardPatch: "<op>: operands sharded along dim d by axis 'domain' with different extents: (S(0)) extents
// 3,3,3,3 and (S(0)) extents 0,5,1,4 (strict extents ...)", the same on every rank.
ShardTensor align_extents(const char* op, const ShardTensor& first, const ShardTensor& other);

// `t` redistributed to other's spec (placements and extents): redistribute(t, other.spec()). The same mesh and
// global shape are required (ShapeError naming both specs otherwise).
ShardTensor align_to(const ShardTensor& t, const ShardTensor& other);

}  // namespace shardrt
