// MPI return codes as CommErrors. ShardRT's communicators use MPI_ERRORS_RETURN, so a failing MPI call comes
// back as a code instead of running MPI's fatal handler; these turn the code into a CommError naming the call.
#pragma once
#include <mpi.h>

#include <string>

namespace shardrt {

std::string mpi_error_string(int code);

// Throws CommError("<where>: <call> failed: <MPI's error string>") unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call, const std::string& where);

// Sets MPI_ERRORS_RETURN on `comm` (a communicator the caller handed over, whose handler may be fatal) for the
// life of the scope, and restores the caller's handler afterwards: the calls ShardRT makes on it (duplicate,
// split) then fail as CommErrors too.
class ErrorsReturnScope {
 public:
  explicit ErrorsReturnScope(MPI_Comm comm);
  ~ErrorsReturnScope();
  ErrorsReturnScope(const ErrorsReturnScope&) = delete;
  ErrorsReturnScope& operator=(const ErrorsReturnScope&) = delete;

 private:
  MPI_Comm comm_;
  MPI_Errhandler previous_ = MPI_ERRHANDLER_NULL;
};

}  // namespace shardrt
