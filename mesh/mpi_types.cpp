#include "mesh/mpi_types.h"

#include <algorithm>

#include "runtime/errors.h"
#include "runtime/half.h"

namespace shardrt {

namespace {

struct Bf16Codec {
  static float load(uint16_t b) { return bf16_to_float(bf16{b}); }
  static uint16_t store(float f) { return float_to_bf16(f).bits; }
};
struct F16Codec {
  static float load(uint16_t b) { return f16_to_float(f16{b}); }
  static uint16_t store(float f) { return float_to_f16(f).bits; }
};

struct Add {
  static float apply(float a, float b) { return a + b; }
};
struct Max {
  static float apply(float a, float b) { return std::max(a, b); }
};
struct Min {
  static float apply(float a, float b) { return std::min(a, b); }
};

// MPI's user-function signature: inout[i] = in[i] (op) inout[i].
template <typename Codec, typename Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = Codec::store(Op::apply(Codec::load(a[i]), Codec::load(b[i])));
}

MPI_Op make_op(MPI_User_function* fn) {
  MPI_Op op;
  MPI_Op_create(fn, /*commute=*/1, &op);
  return op;  // kept for the life of the process: freeing after MPI_Finalize would be an error
}

template <typename Codec>
MPI_Op half_op(ReduceOp op) {
  static MPI_Op sum = make_op(&half_reduce<Codec, Add>);
  static MPI_Op max = make_op(&half_reduce<Codec, Max>);
  static MPI_Op min = make_op(&half_reduce<Codec, Min>);
  return op == ReduceOp::max ? max : op == ReduceOp::min ? min : sum;
}

template <typename T>
void divide(void* data, int64_t n, double d) {
  auto* p = static_cast<T*>(data);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / d);
}

}  // namespace

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::f64:
      return MPI_DOUBLE;
    case DType::f32:
      return MPI_FLOAT;
    case DType::bf16:
    case DType::f16:
      return MPI_UINT16_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::i32:
      return MPI_INT32_T;
    case DType::u8:
    case DType::boolean:
      return MPI_UINT8_T;
  }
  throw DTypeError(detail::concat("mpi_datatype: unknown dtype ", static_cast<int>(t)));
}

MPI_Op mpi_reduce_op(DType t, ReduceOp op) {
  if (t == DType::bf16) return half_op<Bf16Codec>(op);
  if (t == DType::f16) return half_op<F16Codec>(op);
  switch (op) {
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::sum:
    case ReduceOp::mean:
      return MPI_SUM;
  }
  return MPI_SUM;
}

void divide_host(void* data, DType t, int64_t n, double divisor) {
  switch (t) {
    case DType::f64:
      return divide<double>(data, n, divisor);
    case DType::f32:
      return divide<float>(data, n, divisor);
    case DType::bf16: {
      auto* p = static_cast<uint16_t*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] = Bf16Codec::store(static_cast<float>(Bf16Codec::load(p[i]) / divisor));
      return;
    }
    case DType::f16: {
      auto* p = static_cast<uint16_t*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] = F16Codec::store(static_cast<float>(F16Codec::load(p[i]) / divisor));
      return;
    }
    default:
      throw DTypeError(detail::concat("divide_host: ", dtype_name(t), " is not a floating dtype"));
  }
}

}  // namespace shardrt
