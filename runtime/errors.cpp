#include "runtime/errors.h"

#include <atomic>

namespace shardrt {

namespace {
std::atomic<int> g_error_rank{-1};

std::string with_rank(const char* kind, const std::string& msg) {
  int r = g_error_rank.load();
  return r >= 0 ? detail::concat(kind, " [rank ", r, "]: ", msg) : detail::concat(kind, ": ", msg);
}
}  // namespace

void set_error_rank(int rank) { g_error_rank.store(rank); }
int error_rank() { return g_error_rank.load(); }

Error::Error(const char* kind, const std::string& msg) : std::runtime_error(with_rank(kind, msg)), kind_(kind) {}

}  // namespace shardrt
