#include "mesh/mpi_call.h"

#include "runtime/errors.h"

namespace shardrt {

std::string mpi_error_string(int code) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, s, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(s, static_cast<std::size_t>(len));
}

void check_mpi(int rc, const char* call, const std::string& where) {
  if (rc != MPI_SUCCESS) throw CommError(detail::concat(where, ": ", call, " failed: ", mpi_error_string(rc)));
}

ErrorsReturnScope::ErrorsReturnScope(MPI_Comm comm) : comm_(comm) {
  check_mpi(MPI_Comm_get_errhandler(comm_, &previous_), "MPI_Comm_get_errhandler", "ShardRT setup");
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", "ShardRT setup");
}

ErrorsReturnScope::~ErrorsReturnScope() {
  MPI_Comm_set_errhandler(comm_, previous_);
  MPI_Errhandler_free(&previous_);  // releases the reference MPI_Comm_get_errhandler took
}

}  // namespace shardrt
