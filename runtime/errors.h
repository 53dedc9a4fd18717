// Typed errors. Every message names the op and the shapes/dtypes/devices involved, and is prefixed
// with the rank when one is known, so a failure in a multi-rank job says where it happened.
#pragma once
#include <stdexcept>
#include <string>

namespace shardrt {

// The mesh layer sets this once MPI is up; -1 means "no rank known" (serial use).
void set_error_rank(int rank);
int error_rank();

class Error : public std::runtime_error {
 public:
  Error(const char* kind, const std::string& msg);
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
};

#define SHARDRT_DEFINE_ERROR(Name) \
  class Name : public Error {      \
   public:                         \
    explicit Name(const std::string& msg) : Error(#Name, msg) {} \
  };
SHARDRT_DEFINE_ERROR(ShapeError)     // shapes do not fit the op
SHARDRT_DEFINE_ERROR(DTypeError)     // dtype unsupported or mismatched
SHARDRT_DEFINE_ERROR(DeviceError)    // device mismatch, or op not implemented on a device
SHARDRT_DEFINE_ERROR(IoError)        // file missing, truncated, malformed
SHARDRT_DEFINE_ERROR(ValueError)     // a bad argument value (negative size, unknown name, ...)
SHARDRT_DEFINE_ERROR(AutogradError)  // misuse of the tape (second backward through freed buffers, ...)
SHARDRT_DEFINE_ERROR(CudaError)      // a CUDA or cuBLAS call failed
SHARDRT_DEFINE_ERROR(CommError)      // a collective failed or timed out
#undef SHARDRT_DEFINE_ERROR

}  // namespace shardrt

// Throw `Type` with a message built by streaming the arguments: SHARDRT_CHECK(cond, ShapeError, "op: ", a, " vs ", b)
#define SHARDRT_CHECK(cond, Type, ...)                                        \
  do {                                                                        \
    if (!(cond)) throw Type(::shardrt::detail::concat(__VA_ARGS__));          \
  } while (0)

#include <sstream>
namespace shardrt::detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace shardrt::detail
