// autograd/ops/conv: conv (and its 1/2/3-d wrappers) and conv_transpose against the direct-loop references,
// gradcheck with stride, padding, dilation and bias, typed errors, and empty batch or spatial dims (which the
// pooling and upsampling ops share).
#include "tests/autograd/op_testing.h"
#include <utility>

using namespace shardrt;
using namespace shardrt::test;

namespace {

// The kernels' geometry of conv(x, w) with one stride / padding / dilation per spatial dim, or one for all.
kernels::cpu::ConvGeometry conv_geometry(const Tensor& x, const Tensor& w, const std::vector<int64_t>& stride,
                                         const std::vector<int64_t>& pad, const std::vector<int64_t>& dilation) {
  const int nd = x.dim() - 2;
  auto per_dim = [nd](const std::vector<int64_t>& values) {
    std::vector<int64_t> r(nd);
    for (int d = 0; d < nd; ++d) r[d] = values[values.size() == 1 ? 0 : d];
    return r;
  };
  std::vector<int64_t> in(nd), kernel(nd);
  for (int d = 0; d < nd; ++d) in[d] = x.size(2 + d), kernel[d] = w.size(2 + d);
  const std::vector<int64_t> s = per_dim(stride), p = per_dim(pad), dl = per_dim(dilation);
  return kernels::cpu::make_conv_geometry(nd, x.size(0), x.size(1), w.size(0), in.data(), kernel.data(), s.data(),
                                          p.data(), dl.data());
}

// Direct convolution of x by w (+ bias when defined), and the output shape.
std::vector<double> conv_reference(const Tensor& x, const Tensor& w, const Tensor& bias,
                                   const std::vector<int64_t>& stride, const std::vector<int64_t>& pad,
                                   const std::vector<int64_t>& dilation, Shape* out_shape) {
  const kernels::cpu::ConvGeometry g = conv_geometry(x, w, stride, pad, dilation);
  *out_shape = {g.batch, g.c_out};
  for (int d = 0; d < g.nd; ++d) out_shape->push_back(g.out[d]);
  const Vec bv = bias.defined() ? bias.to_vector() : Vec();
  return ref_conv(g, x.to_vector(), w.to_vector(), bias.defined() ? &bv : nullptr);
}

// Transposed convolution with kernel == stride, w of shape (Cin, Cout, kernel...).
std::vector<double> conv_transpose_reference(const Tensor& x, const Tensor& w, const Tensor& bias) {
  std::vector<int64_t> in, patch;
  for (int d = 2; d < x.dim(); ++d) in.push_back(x.size(d)), patch.push_back(w.size(d));
  const kernels::cpu::ConvGeometry g = patch_geometry(x.dim() - 2, x.size(0), x.size(1), w.size(1), in, patch);
  const Vec bv = bias.to_vector();
  return ref_conv_transpose_patch(g, x.to_vector(), w.to_vector(), &bv);
}

}  // namespace

// ---- convolution -------------------------------------------------------------------------------------------------

TEST_CASE("conv forward: a hand-computed case and direct loops in 1, 2 and 3 d", "[spatial]") {
  // A difference filter plus bias: y[i] = x[i] - x[i + 1] + 0.5.
  Tensor x = from_vector({1, 2, 4, 8}, {1, 1, 4}, kF64);
  Tensor w = from_vector({1, -1}, {1, 1, 2}, kF64);
  require_values(conv1d(x, w, from_vector({0.5}, {1}, kF64)), {1, 1, 3}, {-0.5, -1.5, -3.5});
  // Padding 1, stride 2: windows [0, 1], [2, 4], [8, 0].
  require_values(conv1d(x, w, Tensor(), 2, 1), {1, 1, 3}, {-1, -2, 8});

  Generator gen(14);
  struct Case {
    Shape x, w;
    std::vector<int64_t> stride, padding, dilation;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9}, {4, 3, 3}, {2}, {1}, {2}},
      {{2, 2, 6, 5}, {3, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}},
      {{1, 2, 5, 4, 6}, {2, 2, 2, 3, 2}, {1, 2, 2}, {1}, {2, 1, 1}},
  };
  for (const Case& c : cases) {
    INFO("x " << shape_str(c.x) << " w " << shape_str(c.w));
    Tensor xi = randn(c.x, kF64, &gen), wi = randn(c.w, kF64, &gen), bi = randn({c.w[0]}, kF64, &gen);
    Shape want_shape;
    const std::vector<double> want = conv_reference(xi, wi, bi, c.stride, c.padding, c.dilation, &want_shape);
    Tensor y = conv(xi, wi, bi, c.stride, c.padding, c.dilation);
    REQUIRE(y.shape() == want_shape);
    require_close(y.to_vector(), want, 1e-12);
    Tensor y32 = conv(xi.to(DType::f32), wi.to(DType::f32), bi.to(DType::f32), c.stride, c.padding, c.dilation);
    require_close(y32.to_vector(), want, 1e-5);
  }
  // The fixed-rank wrappers agree with conv.
  Tensor x2 = randn({1, 2, 5, 5}, kF64, &gen), w2 = randn({3, 2, 3, 3}, kF64, &gen);
  require_close(conv2d(x2, w2, Tensor(), 2, 1, 1).to_vector(), conv(x2, w2, Tensor(), {2}, {1}, {1}).to_vector(), 0);
}

TEST_CASE("conv gradcheck in 1, 2 and 3 d with stride, padding, dilation and bias", "[spatial]") {
  Generator gen(15);
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{conv1d(in[0], in[1], in[2], 2, 1, 2)}; },
      {leaf({2, 2, 8}, gen), leaf({3, 2, 3}, gen), leaf({3}, gen)});
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{conv(in[0], in[1], in[2], {2, 1}, {1, 0}, {1, 2})};
      },
      {leaf({1, 2, 5, 5}, gen), leaf({2, 2, 3, 2}, gen), leaf({2}, gen)});
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{conv3d(in[0], in[1], in[2], 1, 1, 1)}; },
      {leaf({1, 2, 3, 3, 3}, gen), leaf({2, 2, 2, 2, 2}, gen), leaf({2}, gen)});
  // Stride 2 with dilation 2 in 3-d, no bias.
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{conv3d(in[0], in[1], Tensor(), 2, 1, 2)}; },
      {leaf({1, 1, 4, 5, 4}, gen), leaf({2, 1, 2, 2, 2}, gen)});
  // Only the weight and bias require grad (the input is data): the input grad is skipped.
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{conv2d(in[0], in[1], in[2], 1, 1)}; },
      {randn({1, 2, 4, 4}, kF64, &gen), leaf({2, 2, 3, 3}, gen), leaf({2}, gen)});
}

TEST_CASE("conv_transpose with kernel == stride: direct loops and gradcheck", "[spatial]") {
  Generator gen(16);
  for (const auto& [x_shape, w_shape] : std::vector<std::pair<Shape, Shape>>{
           {{2, 3, 4}, {3, 2, 2}}, {{1, 2, 2, 3}, {2, 3, 2, 3}}, {{1, 2, 2, 2, 1}, {2, 2, 2, 1, 3}}}) {
    INFO("x " << shape_str(x_shape) << " w " << shape_str(w_shape));
    Tensor x = randn(x_shape, kF64, &gen), w = randn(w_shape, kF64, &gen), b = randn({w_shape[1]}, kF64, &gen);
    Tensor y = conv_transpose(x, w, b);
    Shape want_shape{x_shape[0], w_shape[1]};
    for (size_t d = 2; d < x_shape.size(); ++d) want_shape.push_back(x_shape[d] * w_shape[d]);
    REQUIRE(y.shape() == want_shape);
    require_close(y.to_vector(), conv_transpose_reference(x, w, b), 1e-12);
  }
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{conv_transpose(in[0], in[1], in[2])}; },
      {leaf({2, 2, 3}, gen), leaf({2, 3, 2}, gen), leaf({3}, gen)});
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{conv_transpose(in[0], in[1])}; },
      {leaf({1, 2, 2, 2}, gen), leaf({2, 2, 2, 3}, gen)});
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{conv_transpose(in[0], in[1], in[2])}; },
      {leaf({1, 2, 2, 1, 2}, gen), leaf({2, 1, 2, 2, 2}, gen), leaf({1}, gen)});
}

TEST_CASE("conv rejects bad shapes and arguments with typed errors", "[spatial]") {
  Tensor x = zeros({1, 3, 5, 5}, kF64);
  REQUIRE_THROWS_AS(conv2d(x, zeros({2, 4, 3, 3}, kF64)), ShapeError);                 // Cin mismatch
  REQUIRE_THROWS_AS(conv2d(x, zeros({2, 3, 6, 3}, kF64)), ShapeError);                 // kernel > input
  REQUIRE_THROWS_AS(conv2d(x, zeros({2, 3, 4, 4}, kF64), Tensor(), 1, 0, 2), ShapeError);  // dilated kernel > input
  REQUIRE_NOTHROW(conv2d(x, zeros({2, 3, 6, 3}, kF64), Tensor(), 1, 1));               // fits once padded
  REQUIRE_THROWS_AS(conv2d(x, zeros({2, 3, 3, 3}, kF64), zeros({3}, kF64)), ShapeError);  // bias size
  REQUIRE_THROWS_AS(conv2d(zeros({3, 5, 5}, kF64), zeros({2, 3, 3, 3}, kF64)), ShapeError);  // wrong rank
  REQUIRE_THROWS_AS(conv(x, zeros({2, 3, 3, 3}, kF64), Tensor(), {1, 1, 1}), ValueError);   // 3 strides for 2 dims
  REQUIRE_THROWS_AS(conv(x, zeros({2, 3, 3, 3}, kF64), Tensor(), {0}), ValueError);         // stride 0
  REQUIRE_THROWS_AS(conv2d(x, zeros({2, 3, 3, 3})), DTypeError);                             // f64 x, f32 w
  REQUIRE_THROWS_AS(conv_transpose(x, zeros({2, 3, 2, 2}, kF64)), ShapeError);              // w (Cin = 2, ...)
}

// ---- zero-size batches -------------------------------------------------------------------------------------------

TEST_CASE("conv, pooling and upsampling accept an empty batch, forward and backward", "[spatial]") {
  Generator gen(20);
  Tensor x = leaf({0, 2, 4, 4}, gen);
  Tensor w = leaf({3, 2, 3, 3}, gen), b = leaf({3}, gen), wt = leaf({2, 3, 2, 2}, gen);
  const std::vector<std::pair<Tensor, Shape>> results = {
      {conv2d(x, w, b, 1, 1), {0, 3, 4, 4}},        {conv_transpose(x, wt, b), {0, 3, 8, 8}},
      {avg_pool(x, {2}), {0, 2, 2, 2}},             {max_pool(x, {3}, {1}, {1}), {0, 2, 4, 4}},
      {upsample_linear(x, {3, 5}), {0, 2, 3, 5}},   {upsample_nearest(x, {8, 2}), {0, 2, 8, 2}},
  };
  for (const auto& [y, shape] : results) {
    REQUIRE(y.shape() == shape);
    backward(y, zeros(shape, kF64));
  }
  REQUIRE(grad_of(x).shape() == Shape{0, 2, 4, 4});
  require_values(grad_of(w), {3, 2, 3, 3}, std::vector<double>(54, 0.0));
  require_values(grad_of(wt), {2, 3, 2, 2}, std::vector<double>(24, 0.0));
  require_values(grad_of(b), {3}, {0, 0, 0});
}

TEST_CASE("conv and upsample_nearest: an empty spatial dim maps to an empty one", "[spatial]") {
  // A zero-size shard of a sharded input reaches the local ops as an empty dim: the output is empty along it and
  // the weight and bias grads are zeros, not garbage.
  Tensor x = zeros({1, 2, 0}, {DType::f64});
  Tensor w = ones({3, 2, 2}, {DType::f64}), b = ones({3}, {DType::f64});
  set_requires_grad(w);
  set_requires_grad(b);
  Tensor y = conv1d(x, w, b, /*stride=*/2);
  CHECK(y.shape() == Shape{1, 3, 0});
  backward(sum(y));
  for (double v : grad_of(w).to_vector()) CHECK(v == 0.0);
  for (double v : grad_of(b).to_vector()) CHECK(v == 0.0);
  CHECK(upsample_nearest(x, {0}).shape() == Shape{1, 2, 0});
  CHECK_THROWS_AS(upsample_nearest(x, {4}), ShapeError);
  CHECK_THROWS_AS(upsample_nearest(ones({1, 2, 3}, {DType::f64}), {0}), ValueError);
  CHECK_THROWS_AS(conv1d(ones({1, 2, 1}, {DType::f64}), ones({3, 2, 3}, {DType::f64})), ShapeError);
}
