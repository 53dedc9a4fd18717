// Deadlines for blocking communication: every wait in mesh/ polls until done or until its deadline passes,
// so a missing peer turns into a CommError instead of a hang.
#pragma once
#include <chrono>

namespace shardrt {

// Seconds a collective may take before it fails: SHARDRT_COMM_TIMEOUT (a positive number of seconds) when
// set, else 300. A malformed value is a ValueError rather than a silent default, because a wrong timeout
// only shows up when a job hangs.
double default_comm_timeout();

class Deadline {
 public:
  explicit Deadline(double seconds) : start_(std::chrono::steady_clock::now()), seconds_(seconds) {}
  bool expired() const { return elapsed() > seconds_; }
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  double seconds() const { return seconds_; }

 private:
  std::chrono::steady_clock::time_point start_;
  double seconds_;
};

// Pause between two polls of an unfinished operation. Transports such as OpenMPI's shared-memory path only
// progress inside a test call, so polling must stay frequent while data moves; yielding lets other ranks
// sharing the cores run. Only a wait that has lasted seconds (a peer is late, not slow) sleeps between polls
// so it stops burning a core.
class PollBackoff {
 public:
  void pause();

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  unsigned polls_ = 0;
  bool sleeping_ = false;
};

}  // namespace shardrt
