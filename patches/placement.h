// Placements: how a global tensor relates to the local tensors along one mesh axis.
//   Shard(d)  - the global tensor is split along tensor dim d over the ranks of the axis (uneven allowed);
//   Replicate - every rank of the axis holds the whole (global) extent, identical values;
//   Partial   - every rank holds an additive contribution: the global value is the sum over the axis (pending
//               sum, never a mere layout label; never produced from user code).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardrt {

struct Placement {
  enum class Kind : uint8_t { shard, replicate, partial };
  Kind kind = Kind::replicate;
  int dim = -1;  // the tensor dim, for shard

  static Placement Shard(int d) { return {Kind::shard, d}; }
  static Placement Replicate() { return {Kind::replicate, -1}; }
  static Placement Partial() { return {Kind::partial, -1}; }

  bool is_shard() const { return kind == Kind::shard; }
  bool is_shard(int d) const { return kind == Kind::shard && dim == d; }
  bool is_replicate() const { return kind == Kind::replicate; }
  bool is_partial() const { return kind == Kind::partial; }
  bool operator==(const Placement& o) const { return kind == o.kind && (kind != Kind::shard || dim == o.dim); }
  bool operator!=(const Placement& o) const { return !(*this == o); }
  std::string str() const;  // "S(1)", "R", "P"
};

// One placement per mesh axis.
using Placements = std::vector<Placement>;
std::string placements_str(const Placements& p);  // "(S(0), R)"

}  // namespace shardrt
