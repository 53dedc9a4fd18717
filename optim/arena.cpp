#include "optim/arena.h"

#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt::optim {

int ArenaLayout::owner(size_t i) const {
  return shard_numel == 0 ? 0 : static_cast<int>(slots.at(i).offset / shard_numel);
}

namespace {
// Places every slot with shards of `shard_numel`; false when a whole slot is larger than a shard or the slots do not
// fit in `shards` shards.
bool try_place(const std::vector<SlotRequest>& params, int shards, int64_t shard_numel, std::vector<ArenaSlot>& out) {
  out.clear();
  int64_t at = 0;
  for (const SlotRequest& p : params) {
    const int64_t n = shape_numel(p.shape);
    if (p.whole && n > 0 && shard_numel > 0) {
      if (n > shard_numel) return false;
      const int64_t room = shard_numel - at % shard_numel;
      if (n > room) at += room;  // start it on the next shard
    }
    out.push_back({p.name, p.shape, at, n, p.whole});
    at += n;
  }
  return at <= shard_numel * shards;
}
}  // namespace

ArenaLayout plan_layout(const std::vector<SlotRequest>& params, int shards) {
  SHARDRT_CHECK(shards >= 1, ValueError, "plan_layout: ", shards, " shards; an arena needs at least one");
  int64_t total = 0, largest_whole = 0;
  for (const SlotRequest& p : params) {
    total += shape_numel(p.shape);
    if (p.whole) largest_whole = std::max(largest_whole, shape_numel(p.shape));
  }
  ArenaLayout layout;
  layout.shards = shards;
  // The smallest even split first; whole slots may need room: grow the shard until they fit (at most by the
  // largest whole slot per shard, so this ends).
  int64_t shard = std::max<int64_t>((total + shards - 1) / shards, largest_whole);
  const int64_t step = std::max<int64_t>(1, shard / 64);
  while (!try_place(params, shards, shard, layout.slots)) shard += step;
  layout.shard_numel = shard;
  return layout;
}

FlatArena::FlatArena(const ArenaLayout& layout, DType dtype, Device device)
    : buffer_(zeros({layout.total()}, {dtype, device})) {}

Tensor FlatArena::view(const ArenaSlot& slot) const { return buffer_.narrow(0, slot.offset, slot.numel).view(slot.shape); }

Tensor FlatArena::range(int64_t begin, int64_t count) const { return buffer_.narrow(0, begin, count); }

}  // namespace shardrt::optim
