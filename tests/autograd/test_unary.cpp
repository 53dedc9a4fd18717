// autograd/ops/unary: unary maps (gelu variants, pow_scalar, clamp), to_dtype: forward values against the fp64
// formulas, gradcheck on strided and zero-size inputs, grads from saved outputs, casts and their grads.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

using U = kernels::cpu::UnaryOp;

// reference.h's formula for op, as a plain function the case table can point to.
template <U op>
double formula(double v) {
  return ref_unary(op, v);
}

enum class Domain { any, positive, away_from_zero };

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  double (*ref)(double);
  Domain domain;
};

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, formula<U::neg>, Domain::any},
      {"exp", [](const Tensor& x) { return exp(x); }, formula<U::exp>, Domain::any},
      {"log", [](const Tensor& x) { return log(x); }, formula<U::log>, Domain::positive},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, formula<U::sqrt>, Domain::positive},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, formula<U::rsqrt>, Domain::positive},
      {"tanh", [](const Tensor& x) { return tanh(x); }, formula<U::tanh>, Domain::any},
      {"erf", [](const Tensor& x) { return erf(x); }, formula<U::erf>, Domain::any},
      {"abs", [](const Tensor& x) { return abs(x); }, formula<U::abs>, Domain::away_from_zero},
      {"relu", [](const Tensor& x) { return relu(x); }, formula<U::relu>, Domain::away_from_zero},
      {"gelu", [](const Tensor& x) { return gelu(x); }, formula<U::gelu_erf>, Domain::any},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::tanh); }, formula<U::gelu_tanh>, Domain::any},
      {"silu", [](const Tensor& x) { return silu(x); }, formula<U::silu>, Domain::any},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, formula<U::sigmoid>, Domain::any},
      {"pow_scalar 2.5", [](const Tensor& x) { return pow_scalar(x, 2.5); }, [](double v) { return std::pow(v, 2.5); },
       Domain::positive},
      {"pow_scalar 3", [](const Tensor& x) { return pow_scalar(x, 3.0); }, [](double v) { return v * v * v; },
       Domain::any},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.6, 0.4); }, [](double v) { return std::clamp(v, -0.6, 0.4); },
       Domain::any},
  };
  return cases;
}

Tensor unary_input(Domain d, const Shape& shape, Generator& gen) {
  switch (d) {
    case Domain::positive: return uniform(shape, gen, 0.3, 2.0);
    case Domain::away_from_zero: return away_from_zero(shape, gen);
    case Domain::any: break;
  }
  // Normal values nudged away from clamp's bounds, the only kinks among the Domain::any ops.
  Vec v = normal(shape, gen).to_vector();
  for (double& e : v)
    for (double bound : {-0.6, 0.4})
      if (std::abs(e - bound) < 0.05) e += 0.1;
  return from_vector(v, shape, kF64);
}

}  // namespace

TEST_CASE("unary ops: forward values, gradcheck, strided and zero-size inputs", "[dense]") {
  Generator gen(21);
  for (const UnaryCase& c : unary_cases()) {
    INFO(c.name);
    Tensor x = requiring_grad(unary_input(c.domain, {2, 3}, gen));
    require_close(c.op(x), ref_map(x, c.ref));
    require_close(c.op(x.transpose(0, 1)), ref_map(x.transpose(0, 1), c.ref));
    require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {x});
    require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(swap_last(in[0])); },
                      {requiring_grad(unary_input(c.domain, {2, 3}, gen))});
    require_zero_size_ok([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {zeros({0, 3}, kF64)}, {0, 3});
    require_f32_matches_f64([&](const std::vector<Tensor>& in) { return c.op(in[0]); },
                            {unary_input(c.domain, {3, 4}, gen)});
  }
}

TEST_CASE("unary ops: saved outputs give the same grads as the closed forms", "[dense]") {
  Generator gen(22);
  Tensor x = requiring_grad(normal({5}, gen));
  Tensor g = normal({5}, gen);
  backward(sigmoid(x), g);
  const Vec xv = x.to_vector(), gv = g.to_vector();
  Vec want(5);
  for (int i = 0; i < 5; ++i) want[i] = gv[i] * formula<U::sigmoid>(xv[i]) * (1 - formula<U::sigmoid>(xv[i]));
  require_close(grad_of(x), want);
}

TEST_CASE("to_dtype: casts any dtype, grads cast back, integer results carry no grad", "[dense]") {
  Generator gen(23);
  Tensor x = requiring_grad(normal({2, 3}, gen));
  Tensor y = to_dtype(x, DType::f32);
  REQUIRE(y.dtype() == DType::f32);
  REQUIRE(requires_grad(y));
  require_close(y, x.to_vector(), 1e-7);
  Tensor g = normal({2, 3}, gen).to(DType::f32);
  backward(y, g);
  REQUIRE(grad_of(x).dtype() == DType::f64);
  require_close(grad_of(x), g.to_vector());

  Tensor i = to_dtype(from_vector({1.7, -2.2, 3.0}, {3}, kF64), DType::i64);
  REQUIRE(i.dtype() == DType::i64);
  require_close(i, {1, -2, 3});
  Tensor xi = to_dtype(x, DType::i32);
  REQUIRE_FALSE(requires_grad(xi));
  require_close(to_dtype(i, DType::f64), {1, -2, 3});
  require_close(to_dtype(x, DType::bf16), x.to_vector(), 1e-2);

  require_gradcheck([](const std::vector<Tensor>& in) { return to_dtype(in[0], DType::f64); }, {x});
  require_zero_size_ok([](const std::vector<Tensor>& in) { return to_dtype(in[0], DType::f32); },
                       {zeros({0, 2}, kF64)}, {0, 2});
}
