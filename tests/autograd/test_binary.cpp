// autograd/ops/binary: broadcasting binary ops, scalar ops, comparisons and where: forward values against plain
// loops, fp64 gradchecks with broadcasting and strided inputs, which operands get grads, tie rules.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

using B = kernels::cpu::BinaryOp;

// reference.h's formula for op, as a plain function the case table can point to.
template <B op>
double formula(double a, double b) {
  return ref_binary(op, a, b);
}

struct BinaryCase {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
  bool positive_a;  // pow: a > 0
  bool nonzero_b;   // div: b away from 0
};

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", add, formula<B::add>, false, false},
      {"sub", sub, formula<B::sub>, false, false},
      {"mul", mul, formula<B::mul>, false, false},
      {"div", div, formula<B::div>, false, true},
      {"pow", pow, formula<B::pow>, true, false},
      {"maximum", maximum, formula<B::maximum>, false, false},
      {"minimum", minimum, formula<B::minimum>, false, false},
  };
  return cases;
}

Tensor binary_operand(const BinaryCase& c, bool first, const Shape& shape, Generator& gen) {
  if (first && c.positive_a) return uniform(shape, gen, 0.5, 2.0);
  if (!first && c.nonzero_b) return away_from_zero(shape, gen);
  return normal(shape, gen);
}

}  // namespace

TEST_CASE("binary ops: forward values with broadcasting", "[dense]") {
  Generator gen(11);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3, 4}, {3, 1}}, {{4}, {2, 3, 4}}, {{2, 1, 4}, {3, 1}}, {{2, 3}, {}}};
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [sa, sb] : shapes) {
      INFO(c.name << " " << shape_str(sa) << " with " << shape_str(sb));
      Tensor a = binary_operand(c, true, sa, gen), b = binary_operand(c, false, sb, gen);
      Tensor y = c.op(a, b);
      REQUIRE(y.shape() == broadcast_shapes(sa, sb, "test"));
      require_close(y, ref_binary(a, b, c.ref));
    }
    // A non-contiguous operand.
    Tensor a = binary_operand(c, true, {4, 3}, gen).transpose(0, 1), b = binary_operand(c, false, {3, 4}, gen);
    require_close(c.op(a, b), ref_binary(a, b, c.ref));
    const OpFn op = [&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); };
    require_f32_matches_f64(op, {binary_operand(c, true, {2, 3, 4}, gen), binary_operand(c, false, {3, 1}, gen)});
    require_zero_size_ok(op, {binary_operand(c, true, {0, 3}, gen), binary_operand(c, false, {3}, gen)}, {0, 3});
    require_zero_size_ok(op, {binary_operand(c, true, {2, 1}, gen), binary_operand(c, false, {0}, gen)}, {2, 0});
  }
}

TEST_CASE("binary ops: gradcheck with broadcasting and strided inputs", "[dense]") {
  Generator gen(12);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {}}, {{2, 3}, {3}}, {{3}, {2, 2, 3}}, {{2, 1, 3}, {2, 1}}};
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [sa, sb] : shapes) {
      INFO(c.name << " " << shape_str(sa) << " with " << shape_str(sb));
      Tensor a = requiring_grad(binary_operand(c, true, sa, gen));
      Tensor b = requiring_grad(binary_operand(c, false, sb, gen));
      require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); }, {a, b});
    }
    INFO(c.name << " with a transposed first operand");
    Tensor a = requiring_grad(binary_operand(c, true, {3, 2}, gen));
    Tensor b = requiring_grad(binary_operand(c, false, {2, 3}, gen));
    require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(swap_last(in[0]), in[1]); }, {a, b});
  }
}

TEST_CASE("binary ops: only operands that require grad get one", "[dense]") {
  Generator gen(13);
  Tensor a = requiring_grad(normal({2, 3}, gen));
  Tensor b = normal({3}, gen);
  backward(sum(mul(a, b)));
  require_close(grad_of(a), ref_binary(ones({2, 3}, kF64), b, [](double, double v) { return v; }));
  REQUIRE_FALSE(grad_of(b).defined());
}

TEST_CASE("maximum and minimum send tied grads to the first operand", "[dense]") {
  Tensor a = requiring_grad(from_vector({1.0, 2.0, 3.0}, {3}, kF64));
  Tensor b = requiring_grad(from_vector({1.0, 5.0, 0.0}, {3}, kF64));
  backward(maximum(a, b), from_vector({1.0, 1.0, 1.0}, {3}, kF64));
  require_close(grad_of(a), {1, 0, 1});
  require_close(grad_of(b), {0, 1, 0});
  zero_grad(a);
  zero_grad(b);
  backward(minimum(a, b), from_vector({1.0, 1.0, 1.0}, {3}, kF64));
  require_close(grad_of(a), {1, 1, 0});
  require_close(grad_of(b), {0, 0, 1});
}

TEST_CASE("add_scalar and mul_scalar", "[dense]") {
  Generator gen(14);
  Tensor x = requiring_grad(normal({2, 3}, gen));
  require_close(add_scalar(x, 1.5), ref_map(x, [](double v) { return v + 1.5; }));
  require_close(mul_scalar(x, -2.0), ref_map(x, [](double v) { return -2.0 * v; }));
  require_close(mul_scalar(x.transpose(0, 1), 3.0), ref_map(x.transpose(0, 1), [](double v) { return 3.0 * v; }));
  require_gradcheck([](const std::vector<Tensor>& in) { return add_scalar(in[0], 0.7); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return mul_scalar(swap_last(in[0]), -1.3); }, {x});
  require_f32_matches_f64([](const std::vector<Tensor>& in) { return mul_scalar(add_scalar(in[0], 0.1), 3.0); },
                          {normal({3, 4}, gen)});
  require_zero_size_ok([](const std::vector<Tensor>& in) { return mul_scalar(add_scalar(in[0], 1.0), 2.0); },
                       {zeros({2, 0}, kF64)}, {2, 0});
}

TEST_CASE("comparisons give u8 0/1 and carry no grad", "[dense]") {
  Tensor a = requiring_grad(from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, kF64));
  Tensor b = from_vector({2, 2, 5}, {3}, kF64);
  const std::vector<std::pair<Tensor (*)(const Tensor&, const Tensor&), Vec>> cases = {
      {eq, {0, 1, 0, 0, 0, 0}}, {ne, {1, 0, 1, 1, 1, 1}}, {lt, {1, 0, 1, 0, 0, 0}},
      {le, {1, 1, 1, 0, 0, 0}}, {gt, {0, 0, 0, 1, 1, 1}}, {ge, {0, 1, 0, 1, 1, 1}}};
  for (const auto& [op, want] : cases) {
    Tensor y = op(a, b);
    REQUIRE(y.dtype() == DType::u8);
    REQUIRE(y.shape() == Shape{2, 3});
    REQUIRE_FALSE(requires_grad(y));
    require_close(y, want);
  }
  require_close(gt(a, full({}, 3.0, kF64)), {0, 0, 0, 1, 1, 1});
  require_close(lt(a.transpose(0, 1), from_vector({2, 4}, {2}, kF64)), {1, 0, 0, 0, 0, 0});
  REQUIRE(ge(zeros({0, 3}, kF64), b).shape() == Shape{0, 3});
  const Vec nan_vs_one = {NAN, 1.0};
  require_close(eq(from_vector(nan_vs_one, {2}, kF64), from_vector(nan_vs_one, {2}, kF64)), {0, 1});
  require_close(ne(from_vector(nan_vs_one, {2}, kF64), from_vector(nan_vs_one, {2}, kF64)), {1, 0});
  require_close(gt(a.to(DType::f32), b.to(DType::f32)), gt(a, b).to_vector());
}

TEST_CASE("where: forward with broadcasting, u8 and bool conditions, gradcheck", "[dense]") {
  Generator gen(15);
  Tensor cond = gt(normal({3, 1}, gen), full({}, 0.0, kF64));
  Tensor a = requiring_grad(normal({2, 3, 4}, gen));
  Tensor b = requiring_grad(normal({4}, gen));
  Tensor y = where(cond, a, b);
  REQUIRE(y.shape() == Shape{2, 3, 4});
  const Vec cv = cond.to_vector(), av = a.to_vector(), bv = b.to_vector();
  Vec want(24);
  for (int64_t i = 0; i < 24; ++i) {
    const Index idx = unravel(i, {2, 3, 4});
    want[i] = cv[idx[1]] != 0 ? av[i] : bv[idx[2]];
  }
  require_close(y, want);
  require_gradcheck([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); }, {a, b});

  Tensor bool_cond = from_vector({1, 0, 1}, {3}, {DType::boolean, Device::cpu()});
  Tensor scalar = requiring_grad(full({}, 2.5, kF64));
  Tensor rows = requiring_grad(normal({2, 3}, gen));
  const Vec rv = rows.to_vector();
  require_close(where(bool_cond, scalar, rows), {2.5, rv[1], 2.5, 2.5, rv[4], 2.5});
  require_gradcheck([&](const std::vector<Tensor>& in) { return where(bool_cond, in[0], swap_last(in[1])); },
                    {scalar, requiring_grad(normal({3, 3}, gen))});

  const OpFn op = [&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); };
  require_f32_matches_f64(op, {normal({2, 3, 4}, gen), normal({4}, gen)});
  require_zero_size_ok(op, {zeros({0, 3, 4}, kF64), zeros({4}, kF64)}, {0, 3, 4});
}
