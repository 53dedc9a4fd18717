// Generation-counted handle tables: what turns the C API's {uint64_t id} handles back into C++ objects.
//
// An id packs (kind, generation, slot): slot = id & 0xffffffff, generation = (id >> 32) & 0xffffff,
// kind = id >> 56. Destroying frees the slot and bumps its generation, so a stale copy of the id no longer matches
// and is reported as an invalid handle (never a use after free); an id of another kind (a model passed where a
// tensor is expected, through a cast) or one never issued fails the same way. Id 0 is the null handle: kinds start
// at 1, so no issued id is 0.
//
// Objects are held by shared_ptr: destroying a handle drops the table's reference, and whatever still uses the
// object (a model keeping its mesh) keeps it alive.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace shardrt::capi {

enum class HandleKind : uint8_t { context = 1, mesh, tensor, sharded, model, optimizer };
const char* handle_kind_name(HandleKind k);

// Thrown for an id that does not name a live object of the expected kind; entry points map it to
// SHARDRT_ERR_INVALID_HANDLE.
struct InvalidHandle {
  std::string message;
};

template <typename T>
class HandleTable {
 public:
  explicit HandleTable(HandleKind kind) : kind_(kind) {}

  uint64_t add(std::shared_ptr<T> obj) {
    std::lock_guard<std::mutex> lock(mu_);
    uint32_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = static_cast<uint32_t>(slots_.size());
      slots_.push_back({});
    }
    slots_[slot].obj = std::move(obj);
    return pack(slot, slots_[slot].generation);
  }

  // The live object `id` names; InvalidHandle naming `what` (the argument) and the reason otherwise.
  std::shared_ptr<T> get(uint64_t id, const char* what) const {
    std::lock_guard<std::mutex> lock(mu_);
    return find(id, what);
  }

  // Drops the table's reference and retires the id.
  void remove(uint64_t id, const char* what) {
    std::lock_guard<std::mutex> lock(mu_);
    find(id, what);
    const uint32_t slot = static_cast<uint32_t>(id & 0xffffffffu);
    slots_[slot].obj.reset();
    slots_[slot].generation = (slots_[slot].generation + 1) & 0xffffffu;
    if (slots_[slot].generation == 0) slots_[slot].generation = 1;
    free_.push_back(slot);
  }

 private:
  struct Slot {
    uint32_t generation = 1;  // never 0, so even slot 0's ids differ from the null handle in more than the kind
    std::shared_ptr<T> obj;
  };

  uint64_t pack(uint32_t slot, uint32_t generation) const {
    return (static_cast<uint64_t>(kind_) << 56) | (static_cast<uint64_t>(generation) << 32) | slot;
  }

  std::shared_ptr<T> find(uint64_t id, const char* what) const {
    const std::string name = std::string(handle_kind_name(kind_));
    if (id == 0) throw InvalidHandle{std::string(what) + " is the null " + name + " handle (never created, or creation failed)"};
    const auto kind = static_cast<uint8_t>(id >> 56);
    if (kind != static_cast<uint8_t>(kind_)) {
      const char* other = kind >= 1 && kind <= 6 ? handle_kind_name(static_cast<HandleKind>(kind)) : "no";
      throw InvalidHandle{std::string(what) + " is not a " + name + " handle (it is a " + other + " handle)"};
    }
    const uint32_t slot = static_cast<uint32_t>(id & 0xffffffffu);
    const uint32_t generation = static_cast<uint32_t>((id >> 32) & 0xffffffu);
    if (slot >= slots_.size())
      throw InvalidHandle{std::string(what) + " is a " + name + " handle that was never created"};
    const Slot& s = slots_[slot];
    if (s.generation != generation || !s.obj)
      throw InvalidHandle{std::string(what) + " is a " + name + " handle that was destroyed"};
    return s.obj;
  }

  HandleKind kind_;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
};

}  // namespace shardrt::capi
