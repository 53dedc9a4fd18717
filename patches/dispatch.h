// Picking a patch by input placements. Each sharded op keeps a small table of the patches it has, in order;
// the first whose `accepts` holds runs. None → MissingShardPatch naming the op and the placements received.
// There is no silent gather-and-run-serially fallback.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "patches/errors.h"
#include "patches/shard_tensor.h"

namespace shardrt {

template <typename Signature>
struct Patch;

template <typename R, typename... Args>
struct Patch<R(Args...)> {
  const char* name;                           // e.g. "linear/shard-any-non-feature-dim"
  std::function<bool(Args...)> accepts;       // a pure function of placements and shapes, identical on every rank
  std::function<R(Args...)> run;
};

// "op: no patch for placements (S(0), R) and (R, R)"
std::string describe_placements(const std::vector<const ShardTensor*>& inputs);

template <typename R, typename... Args>
R dispatch_patch(const char* op, const std::vector<Patch<R(Args...)>>& table,
                 const std::vector<const ShardTensor*>& described, Args... args) {
  for (const auto& p : table)
    if (p.accepts(args...)) return p.run(args...);
  throw MissingShardPatch(detail::concat(op, ": no patch for placements ", describe_placements(described)));
}

}  // namespace shardrt
