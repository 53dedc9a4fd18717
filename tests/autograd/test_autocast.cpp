// Autocast (autograd/autocast.h): the scope itself (off by default, nesting, per thread, bad dtypes), and every
// matmul-class op under bf16 and f16 against its explicit reference — the operands rounded to the compute dtype
// by hand, then the plain f32 op, grad_output rounded by hand for the grad products — BIT FOR BIT on the CPU,
// forward and every input grad. f64 inputs are untouched, the backward follows the forward's choice whatever
// scope is open when it runs, and the rounding is shown to happen (autocast differs from the plain f32 op).
#include <catch2/catch.hpp>

#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

using namespace shardrt;

namespace {

using Inputs = std::vector<Tensor>;
using Op = std::function<std::vector<Tensor>(const Inputs&)>;

const TensorOptions kF32{DType::f32, Device::cpu()};

// f32 x rounded to `dt` (round to nearest even) and widened back: the hand-made operand of the reference.
Tensor rounded(const Tensor& x, DType dt) { return x.to(dt).to(DType::f32); }

struct Run {
  std::vector<Tensor> outputs, grads;  // grads: one per input (undefined where the input takes none)
};

// op on fresh leaf copies of `inputs`, backward with `grad_outputs`, optionally inside an Autocast scope (forward
// and backward), or with the backward outside it (`backward_outside`).
Run run(const Op& op, const Inputs& inputs, const std::vector<Tensor>& grad_outputs, std::optional<DType> scope,
        bool backward_outside = false) {
  Inputs leaves;
  for (const Tensor& t : inputs) {
    Tensor l = t.defined() ? t.clone() : Tensor();
    if (l.defined()) set_requires_grad(l);
    leaves.push_back(l);
  }
  Run r;
  {
    std::optional<Autocast> guard;
    if (scope) guard.emplace(*scope);
    r.outputs = op(leaves);
    if (!backward_outside) backward(r.outputs, grad_outputs);
  }
  if (backward_outside) backward(r.outputs, grad_outputs);
  for (const Tensor& l : leaves) r.grads.push_back(l.defined() ? grad_of(l) : Tensor());
  return r;
}

void require_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what << ": got " << got.str() << ", want " << want.str());
  REQUIRE(got.defined());
  REQUIRE(want.defined());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  CHECK(got.to_vector() == want.to_vector());
}

// The autocast run of `op` against the reference: products of rounded operands (`product_inputs` marks which
// inputs are product operands; the others — biases — enter unrounded), backward with rounded grad_outputs for the
// operand grads. A bias grad sums the UNROUNDED grad_output, so it is checked against a plain f32 run with the
// unrounded grad_outputs. Also: the autocast output differs from the plain f32 one (rounding happened), and a
// backward run outside the scope gives the same bits.
// `product_grad_outputs` marks the grad_outputs the backward rounds (all by default; attention's dlse enters its
// backward elementwise, in f32).
void check_op(const std::string& name, const Op& op, const Inputs& inputs, const std::vector<bool>& product_inputs,
              uint64_t seed, const std::vector<bool>& product_grad_outputs = {}) {
  Generator gen(seed);
  const std::vector<Tensor> probe = op(inputs);
  std::vector<Tensor> grad_outputs;
  for (const Tensor& o : probe) grad_outputs.push_back(randn(o.shape(), kF32, &gen));
  const Run plain = run(op, inputs, grad_outputs, std::nullopt);
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(name << " under " << dtype_name(dt));
    Inputs ref_inputs;
    for (size_t i = 0; i < inputs.size(); ++i)
      ref_inputs.push_back(product_inputs[i] ? rounded(inputs[i], dt) : inputs[i]);
    std::vector<Tensor> ref_grad_outputs;
    for (size_t k = 0; k < grad_outputs.size(); ++k) {
      const bool product = product_grad_outputs.empty() || product_grad_outputs[k];
      ref_grad_outputs.push_back(product ? rounded(grad_outputs[k], dt) : grad_outputs[k]);
    }
    const Run ref = run(op, ref_inputs, ref_grad_outputs, std::nullopt);
    const Run got = run(op, inputs, grad_outputs, dt);
    const Run got_outside = run(op, inputs, grad_outputs, dt, /*backward_outside=*/true);
    for (size_t k = 0; k < ref.outputs.size(); ++k) {
      require_bitwise(got.outputs[k], ref.outputs[k], "output " + std::to_string(k));
      CHECK(got.outputs[k].to_vector() != plain.outputs[k].to_vector());
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) continue;
      const std::string what = "grad of input " + std::to_string(i);
      require_bitwise(got.grads[i], product_inputs[i] ? ref.grads[i] : plain.grads[i], what);
      require_bitwise(got_outside.grads[i], got.grads[i], what + " (backward outside the scope)");
    }
  }
  // f64 inputs are the oracle: untouched by a scope.
  Inputs inputs64;
  for (const Tensor& t : inputs) inputs64.push_back(t.defined() ? t.to(DType::f64) : t);
  std::vector<Tensor> grad_outputs64;
  for (const Tensor& g : grad_outputs) grad_outputs64.push_back(g.to(DType::f64));
  const Run plain64 = run(op, inputs64, grad_outputs64, std::nullopt);
  const Run scoped64 = run(op, inputs64, grad_outputs64, DType::bf16);
  for (size_t k = 0; k < plain64.outputs.size(); ++k)
    require_bitwise(scoped64.outputs[k], plain64.outputs[k], name + ": f64 output under bf16 autocast");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined())
      require_bitwise(scoped64.grads[i], plain64.grads[i], name + ": f64 grad under bf16 autocast");
}

Tensor random(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, kF32, &gen);
}

}  // namespace

TEST_CASE("autocast: off by default, nested scopes restore, f32 turns it off, per thread, bad dtypes",
          "[autograd][autocast]") {
  CHECK(!autocast_dtype());
  {
    Autocast outer(DType::bf16);
    CHECK(autocast_dtype() == DType::bf16);
    {
      Autocast inner(DType::f16);
      CHECK(autocast_dtype() == DType::f16);
      {
        Autocast off(DType::f32);
        CHECK(!autocast_dtype());
      }
      CHECK(autocast_dtype() == DType::f16);
    }
    CHECK(autocast_dtype() == DType::bf16);
    std::optional<DType> other_thread = DType::f64;
    std::thread([&] { other_thread = autocast_dtype(); }).join();
    CHECK(!other_thread);
  }
  CHECK(!autocast_dtype());
  for (DType bad : {DType::f64, DType::i64, DType::u8}) {
    INFO(dtype_name(bad));
    CHECK_THROWS_AS(Autocast(bad), DTypeError);
    CHECK(!autocast_dtype());
  }
}

TEST_CASE("autocast: matmul and bmm equal the hand-rounded f32 reference bit for bit (bf16, f16)",
          "[autograd][autocast]") {
  const Op mm = [](const Inputs& in) { return std::vector<Tensor>{matmul(in[0], in[1])}; };
  // Plain, batched, a shared right operand (one GEMM over stacked rows), a shared left operand, broadcast batch
  // dims, and vector operands.
  check_op("matmul 2-D", mm, {random({5, 7}, 1), random({7, 3}, 2)}, {true, true}, 10);
  check_op("matmul batched", mm, {random({2, 5, 7}, 3), random({2, 7, 3}, 4)}, {true, true}, 11);
  check_op("matmul shared right", mm, {random({2, 3, 5, 7}, 5), random({7, 4}, 6)}, {true, true}, 12);
  check_op("matmul shared left", mm, {random({5, 7}, 7), random({3, 7, 4}, 8)}, {true, true}, 13);
  check_op("matmul broadcast", mm, {random({2, 1, 5, 7}, 9), random({3, 7, 2}, 10)}, {true, true}, 14);
  check_op("matmul vector", mm, {random({7}, 11), random({2, 7, 3}, 12)}, {true, true}, 15);
  const Op b = [](const Inputs& in) { return std::vector<Tensor>{bmm(in[0], in[1])}; };
  check_op("bmm", b, {random({3, 4, 6}, 13), random({3, 6, 5}, 14)}, {true, true}, 16);
}

TEST_CASE("autocast: linear (bias added in f32, its grad from the unrounded dy) bit for bit", "[autograd][autocast]") {
  const Op lin = [](const Inputs& in) { return std::vector<Tensor>{linear(in[0], in[1], in[2])}; };
  check_op("linear", lin, {random({2, 5, 9}, 20), random({6, 9}, 21), random({6}, 22)}, {true, true, false}, 23);
  const Op lin_nobias = [](const Inputs& in) { return std::vector<Tensor>{linear(in[0], in[1])}; };
  check_op("linear without bias", lin_nobias, {random({7, 9}, 24), random({4, 9}, 25)}, {true, true}, 26);
}

TEST_CASE("autocast: scaled_dot_product_attention (out and lse, every grad) bit for bit", "[autograd][autocast]") {
  const Op sdpa = [](const Inputs& in) {
    const AttentionOutput o = scaled_dot_product_attention(in[0], in[1], in[2], 0.35);
    return std::vector<Tensor>{o.out, o.lse};
  };
  check_op("attention", sdpa, {random({2, 3, 9, 8}, 30), random({2, 3, 11, 8}, 31), random({2, 3, 11, 5}, 32)},
           {true, true, true}, 33, {true, false});
}

TEST_CASE("autocast: conv1d/2d/3d and conv_transpose (bias in f32) bit for bit", "[autograd][autocast]") {
  const Op c1 = [](const Inputs& in) { return std::vector<Tensor>{conv1d(in[0], in[1], in[2], 2, 1)}; };
  check_op("conv1d", c1, {random({2, 3, 11}, 40), random({4, 3, 3}, 41), random({4}, 42)}, {true, true, false}, 43);
  const Op c2 = [](const Inputs& in) { return std::vector<Tensor>{conv2d(in[0], in[1], in[2], 1, 1, 2)}; };
  check_op("conv2d", c2, {random({2, 3, 7, 6}, 44), random({5, 3, 3, 3}, 45), random({5}, 46)},
           {true, true, false}, 47);
  const Op c3 = [](const Inputs& in) { return std::vector<Tensor>{conv3d(in[0], in[1], in[2], 1, 1)}; };
  check_op("conv3d", c3, {random({1, 2, 4, 5, 3}, 48), random({3, 2, 3, 3, 3}, 49), random({3}, 50)},
           {true, true, false}, 51);
  const Op ct = [](const Inputs& in) { return std::vector<Tensor>{conv_transpose(in[0], in[1], in[2])}; };
  check_op("conv_transpose", ct, {random({2, 4, 3, 3}, 52), random({4, 3, 2, 2}, 53), random({3}, 54)},
           {true, true, false}, 55);
}

TEST_CASE("autocast: the ops around the products stay f32 and exact (layer_norm, softmax, gelu, add)",
          "[autograd][autocast]") {
  const Tensor x = random({4, 6}, 60), w = random({6}, 61), b = random({6}, 62);
  const Tensor plain = add(gelu(softmax(layer_norm(x, {6}, w, b), -1)), x);
  Autocast scope(DType::bf16);
  const Tensor scoped = add(gelu(softmax(layer_norm(x, {6}, w, b), -1)), x);
  REQUIRE(scoped.dtype() == DType::f32);
  CHECK(scoped.to_vector() == plain.to_vector());
}
