// Operand alignment (see align.h): the extent-mismatch policy and the one function the elementwise ops, cat and
// the losses call to give their second operand the first one's extents.
#include "patches/align.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "patches/errors.h"

namespace shardrt {

namespace {

ExtentMismatch from_environment() {
  const char* env = std::getenv("SHARDRT_STRICT_EXTENTS");
  if (env == nullptr || *env == '\0') return ExtentMismatch::redistribute;
  const std::string v = env;
  SHARDRT_CHECK(v == "0" || v == "1", ValueError, "SHARDRT_STRICT_EXTENTS='", v, "' must be 0 or 1");
  return v == "1" ? ExtentMismatch::raise : ExtentMismatch::redistribute;
}

// -1: not read yet (the environment is read on first use, so a bad value is raised by an op, not at load time).
std::atomic<int> g_policy{-1};

std::string extents_str(const Extents& e) {
  std::string s;
  for (std::size_t j = 0; j < e.size(); ++j) {
    if (j) s += ',';
    s += std::to_string(e[j]);
  }
  return s;
}

// The dim of `other` that broadcasting pairs with dim d of `first` (ranks aligned from the right), or -1.
int paired_dim(const ShardTensor& first, const ShardTensor& other, int d) {
  const int k = d - first.dim() + other.dim();
  return k >= 0 && k < other.dim() ? k : -1;
}

// Both Shard of paired dims with the same global size and different extents: the axes align_extents moves.
bool needs_alignment(const ShardTensor& first, const ShardTensor& other, int axis) {
  const Placement& pf = first.spec().placement(axis);
  const Placement& po = other.spec().placement(axis);
  if (!pf.is_shard() || !po.is_shard() || po.dim != paired_dim(first, other, pf.dim)) return false;
  return first.global_shape()[pf.dim] == other.global_shape()[po.dim] &&
         first.spec().extents(axis) != other.spec().extents(axis);
}

}  // namespace

ExtentMismatch extent_mismatch() {
  int p = g_policy.load();
  if (p < 0) {
    p = static_cast<int>(from_environment());
    g_policy.store(p);
  }
  return static_cast<ExtentMismatch>(p);
}

void set_extent_mismatch(ExtentMismatch policy) { g_policy.store(static_cast<int>(policy)); }

bool extents_alignable(const ShardTensor& first, const ShardTensor& other, int axis) {
  const Placement& pf = first.spec().placement(axis);
  const Placement& po = other.spec().placement(axis);
  if (!pf.is_shard() && !po.is_shard()) return true;
  if (!pf.is_shard() || !po.is_shard()) return false;
  return first.spec().extents(axis) == other.spec().extents(axis) || needs_alignment(first, other, axis);
}

ShardTensor align_extents(const char* op, const ShardTensor& first, const ShardTensor& other) {
  if (!same_mesh(first.mesh(), other.mesh())) return other;  // the op's own checks report different meshes
  AxisExtents extents = other.spec().all_extents();
  bool moves = false;
  for (int m = 0; m < first.mesh().ndim(); ++m) {
    if (!needs_alignment(first, other, m)) continue;
    const Placement& pf = first.spec().placement(m);
    SHARDRT_CHECK(extent_mismatch() != ExtentMismatch::raise, MissingShardPatch, op, ": operands sharded along dim ",
                  pf.dim, " by axis '", first.mesh().axis_names()[m], "' with different extents: ",
                  placements_str(first.placements()), " extents ", extents_str(first.spec().extents(m)), " and ",
                  placements_str(other.placements()), " extents ", extents_str(other.spec().extents(m)),
                  " (strict extents: SHARDRT_STRICT_EXTENTS=1 or set_extent_mismatch(ExtentMismatch::raise); "
                  "redistribute one operand to the other's extents first)");
    extents[m] = first.spec().extents(m);
    moves = true;
  }
  if (!moves) return other;
  return redistribute(other, other.placements(), extents);
}

ShardTensor align_to(const ShardTensor& t, const ShardTensor& other) {
  SHARDRT_CHECK(t.defined() && other.defined(), ValueError, "align_to: undefined ShardTensor");
  return redistribute(t, other.spec());
}

}  // namespace shardrt
