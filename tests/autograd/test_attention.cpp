// autograd/ops/attention: scaled_dot_product_attention forward against the naive softmax(scale·QKᵀ)V (out and
// lse), gradcheck through both outputs, no keys, no queries, and shape errors.
#include "tests/autograd/op_testing.h"
#include <cmath>
#include <limits>

using namespace shardrt;
using namespace shardrt::test;

namespace {

// softmax(scale · q kᵀ) v and the row log-sum-exp, for q (..., Nq, D), k (..., Nk, D), v (..., Nk, Dv).
void naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, std::vector<double>& out,
                     std::vector<double>& lse) {
  const int64_t nq = q.size(-2), nk = k.size(-2), d = q.size(-1), dv = v.size(-1);
  ref_attention(q.numel() / (nq * d), nq, nk, d, dv, scale, q.to_vector(), k.to_vector(), v.to_vector(), out, lse);
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
