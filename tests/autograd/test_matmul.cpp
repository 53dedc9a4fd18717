// autograd/ops/matmul: matmul over the NumPy cases, bmm and linear: forward against the fp64 gemm reference,
// gradcheck, grads only where needed, zero-size operands and shape errors.
#include "tests/autograd/op_testing.h"
#include <algorithm>

using namespace shardrt;
using namespace shardrt::test;

namespace {

// x wᵀ + bias over the rows of x.
Vec ref_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  const Vec bv = bias.defined() ? bias.to_vector() : Vec(out, 0.0);
  Vec y(rows * out);
  for (int64_t r = 0; r < rows; ++r) std::copy(bv.begin(), bv.end(), y.begin() + r * out);
  return ref_gemm(false, true, rows, out, in, 1.0, x.to_vector(), in, w.to_vector(), in, 1.0, y, out);
}

}  // namespace

TEST_CASE("matmul: NumPy cases, forward against loops and gradcheck", "[dense]") {
  Generator gen(51);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3}, {3}},                // dot
      {{3}, {3, 2}},             // vector x matrix
      {{2, 3}, {3}},             // matrix x vector
      {{2, 3}, {3, 4}},          // plain GEMM
      {{2, 2, 3}, {3, 4}},       // shared right operand
      {{2, 3}, {2, 3, 4}},       // shared left operand
      {{2, 1, 2, 3}, {3, 3, 2}}, // batch dims broadcast both ways
      {{3}, {2, 3, 2}},          // vector x batch
      {{2, 2, 3}, {3}},          // batch x vector
      {{1, 2, 3}, {2, 3, 2}},    // unit batch on the left
  };
  for (const auto& [sa, sb] : cases) {
    INFO(shape_str(sa) << " x " << shape_str(sb));
    Tensor a = requiring_grad(normal(sa, gen)), b = requiring_grad(normal(sb, gen));
    Tensor c = matmul(a, b);
    const auto [want, want_shape] = ref_matmul(a, b);
    REQUIRE(c.shape() == want_shape);
    require_close(c, want);
    require_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b});
  }
  INFO("transposed operands");
  Tensor a = normal({3, 2}, gen), b = normal({4, 3}, gen);
  require_close(matmul(a.transpose(0, 1), b.transpose(0, 1)), ref_matmul(a.transpose(0, 1), b.transpose(0, 1)).first);
  require_gradcheck([](const std::vector<Tensor>& in) { return matmul(swap_last(in[0]), swap_last(in[1])); },
                    {requiring_grad(a.clone()), requiring_grad(b.clone())});
  require_f32_matches_f64([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                          {normal({2, 3, 5}, gen), normal({5, 4}, gen)});
}

TEST_CASE("matmul: grads only for the operand that needs one", "[dense]") {
  Generator gen(52);
  Tensor w = requiring_grad(normal({3, 2}, gen));
  Tensor x = normal({4, 2, 3}, gen);
  require_gradcheck([&](const std::vector<Tensor>& in) { return matmul(x, in[0]); }, {w});
  Tensor v = normal({2, 3}, gen);
  require_gradcheck([&](const std::vector<Tensor>& in) { return matmul(in[0], v); },
                    {requiring_grad(normal({4, 3, 2}, gen))});
}

TEST_CASE("matmul: zero-size operands", "[dense]") {
  require_zero_size_ok([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                       {zeros({0, 3}, kF64), zeros({3, 2}, kF64)}, {0, 2});
  require_zero_size_ok([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                       {zeros({2, 3}, kF64), zeros({0, 3, 2}, kF64)}, {0, 2, 2});
  // An empty inner dimension gives a zero product, and zero grads for the non-empty output.
  Tensor a = requiring_grad(zeros({2, 0}, kF64)), b = requiring_grad(zeros({0, 3}, kF64));
  Tensor c = matmul(a, b);
  require_close(c, Vec(6, 0.0));
  backward(c, ones({2, 3}, kF64));
  REQUIRE(grad_of(a).shape() == Shape{2, 0});
  REQUIRE(grad_of(b).shape() == Shape{0, 3});
}

TEST_CASE("bmm: forward, gradcheck, shape errors", "[dense]") {
  Generator gen(53);
  Tensor a = requiring_grad(normal({2, 2, 3}, gen)), b = requiring_grad(normal({2, 3, 4}, gen));
  require_close(bmm(a, b), ref_matmul(a, b).first);
  require_gradcheck([](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); }, {a, b});
  REQUIRE_THROWS_AS(bmm(normal({2, 2, 3}, gen), normal({3, 3, 4}, gen)), ShapeError);
  REQUIRE_THROWS_AS(bmm(normal({2, 3}, gen), normal({3, 4}, gen)), ShapeError);
  REQUIRE_THROWS_AS(bmm(normal({2, 2, 3}, gen), normal({2, 2, 4}, gen)), ShapeError);
}

TEST_CASE("linear: any input rank, optional bias, forward and gradcheck", "[dense]") {
  Generator gen(54);
  for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    for (bool with_bias : {true, false}) {
      INFO("x " << shape_str(xs) << " bias " << with_bias);
      Tensor x = requiring_grad(normal(xs, gen));
      Tensor w = requiring_grad(normal({5, 4}, gen));
      Tensor bias = with_bias ? requiring_grad(normal({5}, gen)) : Tensor();
      Tensor y = linear(x, w, bias);
      Shape ys = xs;
      ys.back() = 5;
      REQUIRE(y.shape() == ys);
      require_close(y, ref_linear(x, w, bias));
      require_gradcheck([&](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, bias});
    }
  }
  INFO("a transposed input and weight");
  require_gradcheck([](const std::vector<Tensor>& in) { return linear(swap_last(in[0]), swap_last(in[1]), in[2]); },
                    {requiring_grad(normal({4, 3}, gen)), requiring_grad(normal({4, 5}, gen)),
                     requiring_grad(normal({5}, gen))});
  require_f32_matches_f64([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                          {normal({2, 3, 8}, gen), normal({5, 8}, gen), normal({5}, gen)});
}

TEST_CASE("linear: zero rows give zero weight grads and bias grads", "[dense]") {
  Tensor x = requiring_grad(zeros({0, 4}, kF64));
  Tensor w = requiring_grad(ones({3, 4}, kF64));
  Tensor bias = requiring_grad(ones({3}, kF64));
  Tensor y = linear(x, w, bias);
  REQUIRE(y.shape() == Shape{0, 3});
  backward(y, zeros({0, 3}, kF64));
  REQUIRE(grad_of(x).shape() == Shape{0, 4});
  require_close(grad_of(w), Vec(12, 0.0));
  require_close(grad_of(bias), Vec(3, 0.0));
}
