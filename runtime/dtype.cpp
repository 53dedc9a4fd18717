#include "runtime/dtype.h"

#include "runtime/errors.h"

namespace shardrt {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i64: return 8;
    case DType::i32: return 4;
    case DType::u8: return 1;
    case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  for (DType t : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::u8, DType::boolean})
    if (name == dtype_name(t)) return t;
  throw ValueError(detail::concat("dtype_from_name: unknown dtype '", name, "'"));
}

}  // namespace shardrt
