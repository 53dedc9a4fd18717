#include "mesh/deadline.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/errors.h"

namespace shardrt {

double default_comm_timeout() {
  const char* env = std::getenv("SHARDRT_COMM_TIMEOUT");
  if (env == nullptr || *env == '\0') return 300.0;
  char* end = nullptr;
  errno = 0;
  double s = std::strtod(env, &end);
  SHARDRT_CHECK(errno == 0 && end != env && *end == '\0' && std::isfinite(s) && s > 0, ValueError,
                "SHARDRT_COMM_TIMEOUT='", env, "' is not a positive number of seconds");
  return s;
}

void PollBackoff::pause() {
  if (++polls_ < 64) return;  // a short spin catches the common case of a nearly finished operation
  if (!sleeping_ && (polls_ & 255u) == 0)
    sleeping_ = std::chrono::steady_clock::now() - start_ > std::chrono::seconds(2);
  if (sleeping_) std::this_thread::sleep_for(std::chrono::microseconds(200));
  else std::this_thread::yield();
}

}  // namespace shardrt
