// Autocast: a scoped, thread-local compute precision for the matmul-class ops (torch.autocast's idea, kept small).
//
//   {
//     Autocast scope(DType::bf16);   // or DType::f16
//     Tensor loss = model.forward(x); // f32 parameters and activations
//     backward(loss);
//   }                                 // the previous precision is back
//
// Inside a scope, matmul, bmm, linear, scaled_dot_product_attention (and the attention-block pieces the sharded
// patches use) and conv / conv1d-3d / conv_transpose applied to f32 inputs round their operands to the scope's
// dtype (round to nearest even, as runtime/half.h), multiply them with f32 accumulation and return f32. Their
// backward rounds grad_output the same way and multiplies it with the operands as saved (already rounded); the
// grads of f32 inputs are f32. Every other op (norms, softmax, GELU, losses, the residual stream) is untouched and
// stays f32, and so are f64 inputs (the oracle) and anything outside a scope. The rule is applied when an op
// records its forward; its backward uses what the forward chose, whatever scope is active when backward runs.
//
// Off by default. Scopes nest; each restores the precision that was active when it opened, and
// `Autocast off(DType::f32)` turns autocast off inside an enclosing scope. Per thread: a scope opened on one
// thread does not affect another. Only f32 (off), bf16 and f16 are accepted (DTypeError otherwise).
#pragma once
#include <optional>

#include "runtime/dtype.h"
#include "runtime/errors.h"

namespace shardrt {

namespace autocast_detail {
// The innermost scope's compute dtype on this thread; nullopt = off.
inline std::optional<DType>& current() {
  static thread_local std::optional<DType> dtype;
  return dtype;
}
}  // namespace autocast_detail

// The compute dtype of the innermost open scope on this thread (bf16 or f16), or nullopt when autocast is off.
inline std::optional<DType> autocast_dtype() { return autocast_detail::current(); }

class Autocast {
 public:
  explicit Autocast(DType compute) : previous_(autocast_detail::current()) {
    SHARDRT_CHECK(compute == DType::bf16 || compute == DType::f16 || compute == DType::f32, DTypeError,
                  "Autocast: the compute dtype must be bf16 or f16 (or f32 to turn autocast off), got ",
                  dtype_name(compute));
    autocast_detail::current() = compute == DType::f32 ? std::nullopt : std::optional<DType>(compute);
  }
  ~Autocast() { autocast_detail::current() = previous_; }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<DType> previous_;
};

}  // namespace shardrt
