// Flat arenas: every parameter of one dtype lives in one allocation, every grad in another, every kind of optimizer
// state in one more each, so that sharding an arena over P ranks is an offset range: shard r is
// [r * shard_numel, (r + 1) * shard_numel). The arena is padded up to P * shard_numel; padding is zero and stays
// zero (its grads are zero, so every update rule leaves it there).
//
// Parameters are placed in the module's named_parameters() order (forward order for the bundled models, which a
// later per-block gather relies on). A parameter marked `whole` (a Muon matrix, whose update needs the entire
// matrix) never straddles a shard boundary: it is moved to the start of the next shard, and the shard size grows
// until every such parameter fits in one. Its owner is the one rank whose shard holds it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace shardrt::optim {

struct ArenaSlot {
  std::string name;    // state_dict key
  Shape shape;
  int64_t offset = 0;  // first element in the arena
  int64_t numel = 0;
  bool whole = false;  // must lie inside one shard
};

struct ArenaLayout {
  std::vector<ArenaSlot> slots;
  int shards = 1;
  int64_t shard_numel = 0;
  int64_t total() const { return shard_numel * shards; }
  int64_t shard_begin(int shard) const { return shard * shard_numel; }
  // The shard holding the first element of slot `i` (for whole slots: all of it).
  int owner(size_t i) const;
};

struct SlotRequest {
  std::string name;
  Shape shape;
  bool whole = false;
};

// Lays out `params` for `shards` shards. Throws ValueError for shards < 1.
ArenaLayout plan_layout(const std::vector<SlotRequest>& params, int shards);

// One arena: a single zeroed allocation of layout.total() elements of `dtype`.
class FlatArena {
 public:
  FlatArena() = default;
  FlatArena(const ArenaLayout& layout, DType dtype, Device device);
  const Tensor& buffer() const { return buffer_; }
  // Slot i as a tensor of its own shape (a view: writing it writes the arena).
  Tensor view(const ArenaSlot& slot) const;
  // Elements [begin, begin + count) as a 1-D view.
  Tensor range(int64_t begin, int64_t count) const;
  int64_t bytes() const { return buffer_.defined() ? static_cast<int64_t>(buffer_.nbytes()) : 0; }

 private:
  Tensor buffer_;
};

}  // namespace shardrt::optim
