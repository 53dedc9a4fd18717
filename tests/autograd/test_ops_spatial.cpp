// Differentiable attention, convolution, pooling and upsampling: forwards against plain loops or hand-computed
// values, fp64 gradcheck of every input (attention through both out and lse), and typed errors for bad shapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

using namespace shardrt;

namespace {

const TensorOptions kF64{DType::f64, Device::cpu()};

Tensor leaf(const Shape& shape, Generator& gen) {
  Tensor t = randn(shape, kF64, &gen);
  set_requires_grad(t);
  return t;
}

// Pairwise distinct values (a permutation of 0, 0.1, 0.2, ...), so max pooling has no ties that a finite
// difference step could flip.
Tensor distinct(const Shape& shape) {
  const int64_t n = shape_numel(shape);
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<double>((i * 7919) % n) * 0.1;
  Tensor t = from_vector(values, shape, kF64);
  set_requires_grad(t);
  return t;
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(got[i] == Approx(want[i]).margin(tol).epsilon(tol));
  }
}

void require_values(const Tensor& t, const Shape& shape, const std::vector<double>& want) {
  REQUIRE(t.shape() == shape);
  require_close(t.to_vector(), want, 1e-14);
}

void require_gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(fn, inputs);
  INFO(r.report);
  REQUIRE(r.ok);
  REQUIRE(r.any_nonzero_grad);
}

// ---- references built from plain loops --------------------------------------------------------------------------

// softmax(scale · q kᵀ) v and the row log-sum-exp, for q (BH, Nq, D), k (BH, Nk, D), v (BH, Nk, Dv) given flat.
void naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, std::vector<double>& out,
                     std::vector<double>& lse) {
  const int64_t nq = q.size(-2), nk = k.size(-2), d = q.size(-1), dv = v.size(-1);
  const int64_t bh = q.numel() / (nq * d);
  const std::vector<double> qs = q.to_vector(), ks = k.to_vector(), vs = v.to_vector();
  out.assign(bh * nq * dv, 0.0);
  lse.assign(bh * nq, 0.0);
  for (int64_t h = 0; h < bh; ++h)
    for (int64_t i = 0; i < nq; ++i) {
      std::vector<double> score(nk);
      double max_score = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < nk; ++j) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += qs[(h * nq + i) * d + c] * ks[(h * nk + j) * d + c];
        score[j] = scale * s;
        max_score = std::max(max_score, score[j]);
      }
      double total = 0;
      for (int64_t j = 0; j < nk; ++j) total += std::exp(score[j] - max_score);
      lse[h * nq + i] = max_score + std::log(total);
      for (int64_t j = 0; j < nk; ++j) {
        const double p = std::exp(score[j] - lse[h * nq + i]);
        for (int64_t c = 0; c < dv; ++c) out[(h * nq + i) * dv + c] += p * vs[(h * nk + j) * dv + c];
      }
    }
}

// Spatial extents padded to 3 with trailing 1s, as the conv kernels see them.
struct Extents3 {
  int64_t v[3] = {1, 1, 1};
};

Extents3 spatial_of(const Tensor& t) {
  Extents3 e;
  for (int d = 0; d < t.dim() - 2; ++d) e.v[d] = t.size(2 + d);
  return e;
}

Extents3 per_dim(const std::vector<int64_t>& values, int nd, int64_t unused) {
  Extents3 e;
  for (int d = 0; d < 3; ++d) e.v[d] = d < nd ? values[values.size() == 1 ? 0 : d] : unused;
  return e;
}

// Direct convolution: y[b, co, o] = bias[co] + Σ_ci Σ_tap x[b, ci, o·stride - pad + tap·dilation] w[co, ci, tap].
std::vector<double> conv_reference(const Tensor& x, const Tensor& w, const Tensor& bias,
                                   const std::vector<int64_t>& stride_v, const std::vector<int64_t>& pad_v,
                                   const std::vector<int64_t>& dilation_v, Shape* out_shape) {
  const int nd = x.dim() - 2;
  const int64_t batch = x.size(0), cin = x.size(1), cout = w.size(0);
  const Extents3 in = spatial_of(x), kernel = spatial_of(w), stride = per_dim(stride_v, nd, 1),
                 pad = per_dim(pad_v, nd, 0), dilation = per_dim(dilation_v, nd, 1);
  Extents3 out;
  *out_shape = {batch, cout};
  for (int d = 0; d < 3; ++d) {
    out.v[d] = (in.v[d] + 2 * pad.v[d] - dilation.v[d] * (kernel.v[d] - 1) - 1) / stride.v[d] + 1;
    if (d < nd) out_shape->push_back(out.v[d]);
  }
  const std::vector<double> xs = x.to_vector(), ws = w.to_vector();
  const std::vector<double> bs = bias.defined() ? bias.to_vector() : std::vector<double>(cout, 0.0);
  std::vector<double> y;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t co = 0; co < cout; ++co)
      for (int64_t o0 = 0; o0 < out.v[0]; ++o0)
        for (int64_t o1 = 0; o1 < out.v[1]; ++o1)
          for (int64_t o2 = 0; o2 < out.v[2]; ++o2) {
            double sum = bs[co];
            for (int64_t ci = 0; ci < cin; ++ci)
              for (int64_t k0 = 0; k0 < kernel.v[0]; ++k0)
                for (int64_t k1 = 0; k1 < kernel.v[1]; ++k1)
                  for (int64_t k2 = 0; k2 < kernel.v[2]; ++k2) {
                    const int64_t i0 = o0 * stride.v[0] - pad.v[0] + k0 * dilation.v[0];
                    const int64_t i1 = o1 * stride.v[1] - pad.v[1] + k1 * dilation.v[1];
                    const int64_t i2 = o2 * stride.v[2] - pad.v[2] + k2 * dilation.v[2];
                    if (i0 < 0 || i0 >= in.v[0] || i1 < 0 || i1 >= in.v[1] || i2 < 0 || i2 >= in.v[2]) continue;
                    const double xv = xs[(((b * cin + ci) * in.v[0] + i0) * in.v[1] + i1) * in.v[2] + i2];
                    const double wv = ws[(((co * cin + ci) * kernel.v[0] + k0) * kernel.v[1] + k1) * kernel.v[2] + k2];
                    sum += xv * wv;
                  }
            y.push_back(sum);
          }
  return y;
}

// Transposed convolution with kernel == stride: y[b, co, i·kernel + tap] = bias[co] + Σ_ci x[b, ci, i] w[ci, co, tap].
std::vector<double> conv_transpose_reference(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t batch = x.size(0), cin = x.size(1), cout = w.size(1);
  const Extents3 in = spatial_of(x), kernel = spatial_of(w);
  Extents3 out;
  for (int d = 0; d < 3; ++d) out.v[d] = in.v[d] * kernel.v[d];
  const std::vector<double> xs = x.to_vector(), ws = w.to_vector(), bs = bias.to_vector();
  std::vector<double> y(batch * cout * out.v[0] * out.v[1] * out.v[2]);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t co = 0; co < cout; ++co)
      for (int64_t o0 = 0; o0 < out.v[0]; ++o0)
        for (int64_t o1 = 0; o1 < out.v[1]; ++o1)
          for (int64_t o2 = 0; o2 < out.v[2]; ++o2) {
            const int64_t i0 = o0 / kernel.v[0], i1 = o1 / kernel.v[1], i2 = o2 / kernel.v[2];
            const int64_t k0 = o0 % kernel.v[0], k1 = o1 % kernel.v[1], k2 = o2 % kernel.v[2];
            double sum = bs[co];
            for (int64_t ci = 0; ci < cin; ++ci)
              sum += xs[(((b * cin + ci) * in.v[0] + i0) * in.v[1] + i1) * in.v[2] + i2] *
                     ws[(((ci * cout + co) * kernel.v[0] + k0) * kernel.v[1] + k1) * kernel.v[2] + k2];
            y[(((b * cout + co) * out.v[0] + o0) * out.v[1] + o1) * out.v[2] + o2] = sum;
          }
  return y;
}

}  // namespace

// ---- attention ---------------------------------------------------------------------------------------------------

TEST_CASE("attention forward matches the naive softmax(scale·QKᵀ)V, out and lse", "[spatial]") {
  Generator gen(11);
  // Nq != Nk, D != Dv, two leading dims.
  Tensor q = randn({2, 3, 4, 5}, kF64, &gen), k = randn({2, 3, 6, 5}, kF64, &gen), v = randn({2, 3, 6, 2}, kF64, &gen);
  for (double scale : {1.0, 1.0 / std::sqrt(5.0)}) {
    INFO("scale " << scale);
    AttentionOutput a = scaled_dot_product_attention(q, k, v, scale);
    REQUIRE(a.out.shape() == Shape{2, 3, 4, 2});
    REQUIRE(a.lse.shape() == Shape{2, 3, 4});
    std::vector<double> out, lse;
    naive_attention(q, k, v, scale, out, lse);
    require_close(a.out.to_vector(), out, 1e-12);
    require_close(a.lse.to_vector(), lse, 1e-12);
  }
  // f32 runs the same kernel in single precision.
  AttentionOutput a32 = scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), 0.5);
  REQUIRE(a32.out.dtype() == DType::f32);
  std::vector<double> out, lse;
  naive_attention(q, k, v, 0.5, out, lse);
  require_close(a32.out.to_vector(), out, 1e-5);
}

TEST_CASE("attention gradcheck through out and lse", "[spatial]") {
  Generator gen(12);
  for (double scale : {1.0, 1.0 / std::sqrt(3.0)}) {
    INFO("scale " << scale);
    require_gradcheck(
        [scale](const std::vector<Tensor>& in) {
          AttentionOutput a = scaled_dot_product_attention(in[0], in[1], in[2], scale);
          return std::vector<Tensor>{a.out, a.lse};
        },
        {leaf({2, 3, 3}, gen), leaf({2, 4, 3}, gen), leaf({2, 4, 2}, gen)});
  }
  // lse alone depends on q and k only.
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], 0.7).lse};
      },
      {leaf({1, 2, 2, 3}, gen), leaf({1, 2, 5, 3}, gen), randn({1, 2, 5, 4}, kF64, &gen)});
}

TEST_CASE("attention with no keys gives zero output, lse = -inf and zero grads", "[spatial]") {
  Generator gen(13);
  Tensor q = leaf({2, 3, 4}, gen), k = leaf({2, 0, 4}, gen), v = leaf({2, 0, 5}, gen);
  AttentionOutput a = scaled_dot_product_attention(q, k, v, 0.5);
  require_values(a.out, {2, 3, 5}, std::vector<double>(30, 0.0));
  REQUIRE(a.lse.shape() == Shape{2, 3});
  for (double l : a.lse.to_vector()) REQUIRE(l == -std::numeric_limits<double>::infinity());
  backward(a.out, ones({2, 3, 5}, kF64));
  require_values(grad_of(q), {2, 3, 4}, std::vector<double>(24, 0.0));
  REQUIRE(grad_of(k).shape() == Shape{2, 0, 4});
  REQUIRE(grad_of(v).shape() == Shape{2, 0, 5});
}

TEST_CASE("attention with no queries gives empty outputs and zero key grads", "[spatial]") {
  Generator gen(19);
  Tensor q = leaf({2, 0, 3}, gen), k = leaf({2, 4, 3}, gen), v = leaf({2, 4, 2}, gen);
  AttentionOutput a = scaled_dot_product_attention(q, k, v, 1.0);
  REQUIRE(a.out.shape() == Shape{2, 0, 2});
  REQUIRE(a.lse.shape() == Shape{2, 0});
  backward({a.out, a.lse}, {zeros({2, 0, 2}, kF64), zeros({2, 0}, kF64)});
  require_values(grad_of(k), {2, 4, 3}, std::vector<double>(24, 0.0));
  require_values(grad_of(v), {2, 4, 2}, std::vector<double>(16, 0.0));
}

TEST_CASE("attention rejects mismatched shapes", "[spatial]") {
  Tensor q = zeros({2, 3, 4}, kF64);
  REQUIRE_THROWS_AS(scaled_dot_product_attention(q, zeros({2, 5, 3}, kF64), zeros({2, 5, 4}, kF64), 1.0),
                    ShapeError);  // D differs
  REQUIRE_THROWS_AS(scaled_dot_product_attention(q, zeros({2, 5, 4}, kF64), zeros({2, 6, 4}, kF64), 1.0),
                    ShapeError);  // Nk differs
  REQUIRE_THROWS_AS(scaled_dot_product_attention(q, zeros({1, 5, 4}, kF64), zeros({1, 5, 4}, kF64), 1.0),
                    ShapeError);  // leading dims differ
  REQUIRE_THROWS_AS(scaled_dot_product_attention(q, zeros({2, 5, 4}), zeros({2, 5, 4}), 1.0), DTypeError);
}

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

// ---- pooling -----------------------------------------------------------------------------------------------------

TEST_CASE("avg_pool and max_pool forward on hand-computed windows", "[spatial]") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {1, 1, 6}, kF64);
  require_values(avg_pool(x, {2}), {1, 1, 3}, {1.5, 3.5, 5.5});
  // Padding counts as zeros in the average: windows [0, 1], [2, 3], [4, 5], [6, 0].
  require_values(avg_pool(x, {2}, {2}, {1}), {1, 1, 4}, {0.5, 2.5, 4.5, 3});
  require_values(avg_pool(x, {3}, {1}), {1, 1, 4}, {2, 3, 4, 5});
  // Padding acts as -inf, so it never wins the max, even over negative values.
  Tensor negative = from_vector({-1, -2, -3, -4, -5, -6}, {1, 1, 6}, kF64);
  require_values(max_pool(negative, {2}, {2}, {1}), {1, 1, 4}, {-1, -2, -4, -6});

  Tensor y = from_vector({1, 5, 2, 0, 3, 4, 9, 1, 7, 2, 8, 6}, {1, 1, 3, 4}, kF64);
  require_values(max_pool(y, {2, 2}, {1, 2}), {1, 1, 2, 2}, {5, 9, 7, 9});
  require_values(avg_pool(y, {3, 2}, {1, 2}), {1, 1, 1, 2}, {(1 + 5 + 3 + 4 + 7 + 2) / 6.0, (2 + 0 + 9 + 1 + 8 + 6) / 6.0});
}

TEST_CASE("pooling gradcheck in 1, 2 and 3 d", "[spatial]") {
  Generator gen(17);
  require_gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{avg_pool(in[0], {3}, {2}, {1})}; },
                    {leaf({2, 2, 7}, gen)});
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{avg_pool(in[0], {2, 3}, {1, 2}, {1, 0})}; },
      {leaf({1, 2, 4, 5}, gen)});
  require_gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{avg_pool(in[0], {2})}; },
                    {leaf({1, 1, 4, 2, 4}, gen)});
  require_gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{max_pool(in[0], {3}, {2}, {1})}; },
                    {distinct({2, 3, 7})});
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{max_pool(in[0], {2, 3}, {1, 2}, {1, 1})}; },
      {distinct({1, 2, 4, 5})});
  require_gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{max_pool(in[0], {2}, {}, {1})}; },
                    {distinct({1, 2, 3, 4, 3})});
}

TEST_CASE("pooling rejects bad windows with typed errors", "[spatial]") {
  Tensor x = zeros({1, 2, 4, 4}, kF64);
  REQUIRE_THROWS_AS(max_pool(x, {5, 2}), ShapeError);           // kernel larger than the input
  REQUIRE_THROWS_AS(avg_pool(x, {2}, {}, {2}), ValueError);     // padding more than half the kernel
  REQUIRE_THROWS_AS(avg_pool(x, {2, 2, 2}), ValueError);        // 3 kernel sizes for 2 spatial dims
  REQUIRE_THROWS_AS(max_pool(zeros({4, 4}, kF64), {2}), ShapeError);
}

// ---- upsampling --------------------------------------------------------------------------------------------------

TEST_CASE("upsample nearest and linear follow PyTorch's source-index rules", "[spatial]") {
  Tensor x = from_vector({1, 2}, {1, 1, 2}, kF64);
  require_values(upsample_nearest(x, {4}), {1, 1, 4}, {1, 1, 2, 2});
  require_values(upsample_nearest(x, {3}), {1, 1, 3}, {1, 1, 2});
  // align_corners = false: src = max((dst + 0.5) / 2 - 0.5, 0) = 0, 0.25, 0.75, 1.25 (clamped to the edge).
  require_values(upsample_linear(x, {4}), {1, 1, 4}, {1, 1.25, 1.75, 2});
  require_values(upsample_linear(x, {3}, true), {1, 1, 3}, {1, 1.5, 2});

  // Bilinear is the product of the per-axis weights.
  Tensor y = from_vector({1, 2, 3, 4}, {1, 1, 2, 2}, kF64);
  require_values(upsample_linear(y, {3, 3}, true), {1, 1, 3, 3}, {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4});
  require_values(upsample_nearest(y, {2, 4}), {1, 1, 2, 4}, {1, 1, 2, 2, 3, 3, 4, 4});
  // Down-sampling.
  require_values(upsample_nearest(from_vector({1, 2, 3, 4}, {1, 1, 4}, kF64), {2}), {1, 1, 2}, {1, 3});
}

TEST_CASE("upsample gradcheck in 1, 2 and 3 d, both align_corners", "[spatial]") {
  Generator gen(18);
  for (bool align : {false, true}) {
    INFO("align_corners " << align);
    require_gradcheck(
        [align](const std::vector<Tensor>& in) { return std::vector<Tensor>{upsample_linear(in[0], {7}, align)}; },
        {leaf({2, 2, 3}, gen)});
    require_gradcheck(
        [align](const std::vector<Tensor>& in) { return std::vector<Tensor>{upsample_linear(in[0], {5, 2}, align)}; },
        {leaf({1, 2, 3, 4}, gen)});
    require_gradcheck(
        [align](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{upsample_linear(in[0], {3, 4, 2}, align)};
        },
        {leaf({1, 1, 2, 3, 3}, gen)});
  }
  require_gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{upsample_nearest(in[0], {5})}; },
                    {leaf({1, 2, 3}, gen)});
  require_gradcheck(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{upsample_nearest(in[0], {4, 3, 2})}; },
      {leaf({1, 1, 2, 3, 3}, gen)});
}

TEST_CASE("upsample rejects bad sizes with typed errors", "[spatial]") {
  Tensor x = zeros({1, 2, 3, 3}, kF64);
  REQUIRE_THROWS_AS(upsample_nearest(x, {4, 0}), ValueError);
  REQUIRE_THROWS_AS(upsample_linear(x, {4, 4, 4}), ValueError);
  REQUIRE_THROWS_AS(upsample_linear(zeros({1, 2, 0, 3}, kF64), {4, 4}), ShapeError);
  REQUIRE_THROWS_AS(upsample_nearest(zeros({2, 3}, kF64), {4}), ShapeError);
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
