// Minimal leveled logging to stderr, prefixed with the rank when known. Level from SHARDRT_LOG
// (error, warn, info, debug; default warn).
#pragma once
#include <string>

#include "runtime/errors.h"

namespace shardrt {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

LogLevel log_level();
void log_message(LogLevel level, const std::string& msg);

template <typename... Args>
void log_info(const Args&... args) {
  if (log_level() >= LogLevel::info) log_message(LogLevel::info, detail::concat(args...));
}
template <typename... Args>
void log_warn(const Args&... args) {
  if (log_level() >= LogLevel::warn) log_message(LogLevel::warn, detail::concat(args...));
}
template <typename... Args>
void log_debug(const Args&... args) {
  if (log_level() >= LogLevel::debug) log_message(LogLevel::debug, detail::concat(args...));
}

}  // namespace shardrt
