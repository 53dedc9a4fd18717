#include "runtime/logging.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace shardrt {

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* env = std::getenv("SHARDRT_LOG");
    if (!env) return LogLevel::warn;
    if (!std::strcmp(env, "error")) return LogLevel::error;
    if (!std::strcmp(env, "info")) return LogLevel::info;
    if (!std::strcmp(env, "debug")) return LogLevel::debug;
    return LogLevel::warn;
  }();
  return level;
}

void log_message(LogLevel level, const std::string& msg) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  int r = error_rank();
  if (r >= 0)
    std::fprintf(stderr, "[shardrt %s rank %d] %s\n", names[static_cast<int>(level)], r, msg.c_str());
  else
    std::fprintf(stderr, "[shardrt %s] %s\n", names[static_cast<int>(level)], msg.c_str());
}

}  // namespace shardrt
