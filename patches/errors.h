// Errors of the sharded layer.
#pragma once
#include "runtime/errors.h"

namespace shardrt {

// No patch accepts the placements an op received (the message names the op and the placements). There is no
// silent gather-and-run-serially fallback.
class MissingShardPatch : public Error {
 public:
  explicit MissingShardPatch(const std::string& msg) : Error("MissingShardPatch", msg) {}
};

}  // namespace shardrt
