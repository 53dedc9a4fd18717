// libFuzzer target: checkpoint_index::parse (index.json of a sharded checkpoint) on arbitrary text, then a
// round trip: whatever parse accepts, to_json must write and parse must read back to the same index.
// Sources: runtime/ + optim/checkpoint_index.cpp (see tools/fuzz).
#include <cstdint>
#include <string>

#include "optim/checkpoint_index.h"
#include "runtime/errors.h"
#include "tests/fuzz/fuzz_target.h"

SHARDRT_FUZZ_TARGET(checkpoint_index) {
  namespace ci = shardrt::checkpoint_index;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ci::Index index;
  try {
    index = ci::parse("fuzz-checkpoint", text);
  } catch (const shardrt::Error&) {
    return 0;
  }
  // Accepted: it must survive its own writer unchanged (a parse that accepts what to_json cannot reproduce would
  // make a resumed run's next save differ from the checkpoint it resumed from).
  const std::string written = ci::to_json(index).dump();
  const ci::Index again = ci::parse("fuzz-checkpoint", written);
  if (ci::to_json(again).dump() != written) __builtin_trap();
  return 0;
}
