#include "mesh/check_mode.h"

#include <cstdlib>
#include <string>

#include "runtime/errors.h"

namespace shardrt {

bool comm_check_enabled(bool requested) {
  const char* env = std::getenv("SHARDRT_COMM_CHECK");
  if (env == nullptr || *env == '\0') return requested;
  const std::string v = env;
  SHARDRT_CHECK(v == "0" || v == "1", ValueError, "SHARDRT_COMM_CHECK='", v, "' must be 0 or 1");
  return v == "1";
}

}  // namespace shardrt
