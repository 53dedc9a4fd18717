#include "mesh/watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace shardrt {

Watchdog::Watchdog(std::string message, double seconds, Expiry on_expiry) {
  if (!on_expiry) on_expiry = [](const std::string& m) { print_and_exit(m); };
  const auto limit = std::chrono::duration<double>(seconds);
  thread_ = std::thread([this, limit, message = std::move(message), on_expiry = std::move(on_expiry)] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, limit, [this] { return disarmed_; })) return;
    lock.unlock();  // the expiry may end the process; it must not do so holding the lock the owner waits on
    on_expiry(message);
  });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    disarmed_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void Watchdog::print_and_exit(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace shardrt
