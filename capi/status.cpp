// Status codes, the thread-local last error, the entry-point wrapper that keeps exceptions inside the library, and
// the check that a handle's context and MPI are still there.
#include <climits>
#include <cstring>
#include <exception>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>

#include "capi/objects.h"
#include "patches/errors.h"
#include "runtime/errors.h"

namespace shardrt::capi {

namespace {

struct LastError {
  shardrt_status status = SHARDRT_OK;
  std::string message;
};
thread_local LastError last_error;

shardrt_status status_of_kind(const std::string& kind) {
  if (kind == "ShapeError") return SHARDRT_ERR_SHAPE;
  if (kind == "DTypeError") return SHARDRT_ERR_DTYPE;
  if (kind == "DeviceError" || kind == "CudaError") return SHARDRT_ERR_DEVICE;
  if (kind == "IoError") return SHARDRT_ERR_IO;
  if (kind == "ValueError" || kind == "MissingShardPatch") return SHARDRT_ERR_VALUE;
  if (kind == "CommError") return SHARDRT_ERR_COMM;
  if (kind == "AutogradError") return SHARDRT_ERR_STATE;
  return SHARDRT_ERR_INTERNAL;
}

}  // namespace

const char* handle_kind_name(HandleKind k) {
  switch (k) {
    case HandleKind::context: return "context";
    case HandleKind::mesh: return "mesh";
    case HandleKind::tensor: return "tensor";
    case HandleKind::sharded: return "sharded tensor";
    case HandleKind::model: return "model";
    case HandleKind::optimizer: return "optimizer";
  }
  return "?";
}

// Built on first use and never destroyed: handles a program leaves alive at exit would otherwise be destroyed by
// static destructors after MPI_Finalize, freeing communicators MPI no longer knows.
HandleTable<Context>& contexts() {
  static auto* t = new HandleTable<Context>(HandleKind::context);
  return *t;
}
HandleTable<MeshObj>& meshes() {
  static auto* t = new HandleTable<MeshObj>(HandleKind::mesh);
  return *t;
}
HandleTable<TensorObj>& tensors() {
  static auto* t = new HandleTable<TensorObj>(HandleKind::tensor);
  return *t;
}
HandleTable<ShardedObj>& shardeds() {
  static auto* t = new HandleTable<ShardedObj>(HandleKind::sharded);
  return *t;
}
HandleTable<ModelObj>& models_table() {
  static auto* t = new HandleTable<ModelObj>(HandleKind::model);
  return *t;
}
HandleTable<OptimizerObj>& optimizers() {
  static auto* t = new HandleTable<OptimizerObj>(HandleKind::optimizer);
  return *t;
}

std::pair<shardrt_status, std::string> describe_current_exception(const char* fn) {
  const std::string prefix = std::string(fn) + ": ";
  try {
    throw;
  } catch (const CapiError& e) {
    return {e.status, e.message.rfind(prefix, 0) == 0 ? e.message : prefix + e.message};
  } catch (const InvalidHandle& e) {
    return {SHARDRT_ERR_INVALID_HANDLE, prefix + e.message};
  } catch (const Error& e) {
    return {status_of_kind(e.kind()), prefix + e.what()};
  } catch (const nlohmann::json::exception& e) {
    return {SHARDRT_ERR_VALUE, prefix + "JSON: " + e.what()};
  } catch (const std::bad_alloc&) {
    return {SHARDRT_ERR_INTERNAL, prefix + "out of memory"};
  } catch (const std::exception& e) {
    return {SHARDRT_ERR_INTERNAL, prefix + e.what()};
  } catch (...) {
    return {SHARDRT_ERR_INTERNAL, prefix + "unknown exception"};
  }
}

shardrt_status set_error(shardrt_status status, const std::string& message) {
  last_error.status = status;
  last_error.message = message;
  return status;
}

shardrt_status entry(const char* fn, const std::function<void()>& body) {
  try {
    body();
    return SHARDRT_OK;
  } catch (...) {
    const auto [status, message] = describe_current_exception(fn);
    return set_error(status, message);
  }
}

void require_open(const Context& ctx, const char* fn) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    throw CapiError{SHARDRT_ERR_STATE, std::string(fn) + ": MPI is finalized (MPI_Finalize was called); make "
                                                         "ShardRT's calls before it, and only destroy handles after"};
  if (ctx.closed.load())
    throw CapiError{SHARDRT_ERR_STATE, std::string(fn) + ": the context this handle was made from was destroyed "
                                                         "(shardrt_context_destroy); only destroying the handle is "
                                                         "left to do"};
}

void require(const void* p, const char* fn, const char* what) {
  if (!p) throw CapiError{SHARDRT_ERR_NULL_ARGUMENT, std::string(fn) + ": " + what + " is NULL"};
}

DType to_dtype(int dtype, const char* fn) {
  switch (dtype) {
    case SHARDRT_F64: return DType::f64;
    case SHARDRT_F32: return DType::f32;
    case SHARDRT_BF16: return DType::bf16;
    case SHARDRT_F16: return DType::f16;
    case SHARDRT_I64: return DType::i64;
    case SHARDRT_I32: return DType::i32;
    case SHARDRT_U8: return DType::u8;
    default: break;
  }
  throw DTypeError(std::string(fn) + ": dtype " + std::to_string(dtype) +
                   " is not a shardrt_dtype (SHARDRT_F64 = 0 ... SHARDRT_U8 = 6)");
}

nlohmann::json read_json_argument(const char* text, const char* fn, const char* what) {
  require(text, fn, what);
  std::string s(text);
  const size_t first = s.find_first_not_of(" \t\r\n");
  nlohmann::json j;
  if (first != std::string::npos && s[first] == '{') {
    try {
      j = nlohmann::json::parse(s);
    } catch (const std::exception& e) {
      throw ValueError(std::string(fn) + ": " + what + " is not valid JSON: " + e.what());
    }
  } else {
    std::ifstream f(s);
    SHARDRT_CHECK(f.good(), IoError, fn, ": cannot open the ", what, " file '", s,
                  "' (pass a JSON object starting with '{', or a path)");
    try {
      j = nlohmann::json::parse(f);
    } catch (const std::exception& e) {
      throw IoError(std::string(fn) + ": the " + what + " file '" + s + "' is not valid JSON: " + e.what());
    }
  }
  SHARDRT_CHECK(j.is_object(), ValueError, fn, ": ", what, " must be a JSON object, got ", j.dump());
  return j;
}

}  // namespace shardrt::capi

using namespace shardrt::capi;

extern "C" {

const char* shardrt_status_name(int status) {
  switch (status) {
    case SHARDRT_OK: return "SHARDRT_OK";
    case SHARDRT_ERR_NULL_ARGUMENT: return "SHARDRT_ERR_NULL_ARGUMENT";
    case SHARDRT_ERR_INVALID_HANDLE: return "SHARDRT_ERR_INVALID_HANDLE";
    case SHARDRT_ERR_VALUE: return "SHARDRT_ERR_VALUE";
    case SHARDRT_ERR_SHAPE: return "SHARDRT_ERR_SHAPE";
    case SHARDRT_ERR_DTYPE: return "SHARDRT_ERR_DTYPE";
    case SHARDRT_ERR_DEVICE: return "SHARDRT_ERR_DEVICE";
    case SHARDRT_ERR_IO: return "SHARDRT_ERR_IO";
    case SHARDRT_ERR_COMM: return "SHARDRT_ERR_COMM";
    case SHARDRT_ERR_COPY_FORBIDDEN: return "SHARDRT_ERR_COPY_FORBIDDEN";
    case SHARDRT_ERR_STATE: return "SHARDRT_ERR_STATE";
    case SHARDRT_ERR_INTERNAL: return "SHARDRT_ERR_INTERNAL";
  }
  return "SHARDRT_ERR_(unknown status)";
}

const char* shardrt_last_error(void) { return last_error.message.c_str(); }

shardrt_status shardrt_last_status(void) { return last_error.status; }

size_t shardrt_last_error_copy(char* buf, size_t cap) {
  const char* msg = last_error.message.c_str();
  const size_t n = std::strlen(msg);
  if (buf && cap > 0) {
    const size_t k = n < cap - 1 ? n : cap - 1;
    std::memcpy(buf, msg, k);
    buf[k] = '\0';
  }
  return n;
}

void shardrt_clear_error(void) { set_error(SHARDRT_OK, ""); }

}  // extern "C"
