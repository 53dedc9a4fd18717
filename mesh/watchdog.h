// Watchdog: a deadline for one blocking MPI call that has no non-blocking form (MPI_Comm_split,
// MPI_Comm_split_type, MPI_Comm_dup, MPI_Finalize), which a peer dying at the wrong moment blocks forever.
//
// Armed for the life of the scope. If the scope is still open when the deadline passes, a thread of its own
// prints `message` to stderr and ends the process with std::_Exit(1). The caller's FailurePolicy cannot
// apply: a thread blocked inside MPI cannot be made to throw, so under throw_error as under abort_job the
// process ends here.
//
// Why std::_Exit and not MPI_Abort: MPI is initialised single-threaded (MPI_Init), so calling MPI from the
// watchdog thread while the main thread is inside MPI is erroneous, and in practice MPI_Abort then waits on
// the run-time state the blocked call holds (during MPI_Finalize that state is being torn down). _Exit needs
// nothing from MPI and cannot block; the launcher sees a rank exit non-zero without MPI_Finalize and takes
// the rest of the job down, as it does after MPI_Abort.
//
// Costs one thread start and join per scope (tens of microseconds): meant for set-up and finalisation calls,
// never for a collective issued every step (those poll under their deadline instead, see mesh/deadline.h).
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace shardrt {

class Watchdog {
 public:
  // What happens when the deadline passes; receives the message. The default prints it and calls _Exit(1).
  using Expiry = std::function<void(const std::string&)>;

  Watchdog(std::string message, double seconds, Expiry on_expiry = nullptr);
  ~Watchdog();  // disarms: returns at once, whatever the deadline
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Prints `message` to stderr, flushes, and ends the process with exit status 1.
  [[noreturn]] static void print_and_exit(const std::string& message);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

}  // namespace shardrt
