// autograd/ops/loss: mse_loss, relative_l2_loss and cross_entropy: forward, gradcheck in every input, target
// validation.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

TEST_CASE("mse_loss: forward and gradcheck in both inputs", "[dense]") {
  Generator gen(71);
  Tensor p = requiring_grad(normal({2, 3}, gen)), t = requiring_grad(normal({2, 3}, gen));
  const Vec pv = p.to_vector(), tv = t.to_vector();
  double want = 0;
  for (size_t i = 0; i < pv.size(); ++i) want += (pv[i] - tv[i]) * (pv[i] - tv[i]);
  Tensor loss = mse_loss(p, t);
  REQUIRE(loss.shape() == Shape{});
  require_close(loss, {want / 6});
  require_gradcheck([](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); }, {p, t});
  require_gradcheck([](const std::vector<Tensor>& in) { return mse_loss(swap_last(in[0]), in[1]); },
                    {requiring_grad(normal({3, 2}, gen)), requiring_grad(normal({2, 3}, gen))});
  require_zero_size_ok([](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); },
                       {zeros({0, 3}, kF64), zeros({0, 3}, kF64)}, {});
  require_f32_matches_f64([](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); },
                          {normal({4, 5}, gen), normal({4, 5}, gen)});
}

TEST_CASE("relative_l2_loss: forward and gradcheck in both inputs", "[dense]") {
  Generator gen(72);
  Tensor p = requiring_grad(normal({2, 3}, gen)), t = requiring_grad(normal({2, 3}, gen));
  const Vec pv = p.to_vector(), tv = t.to_vector();
  double d = 0, r = 0;
  for (size_t i = 0; i < pv.size(); ++i) d += (pv[i] - tv[i]) * (pv[i] - tv[i]), r += tv[i] * tv[i];
  require_close(relative_l2_loss(p, t), {std::sqrt(d) / std::sqrt(r)});
  require_gradcheck([](const std::vector<Tensor>& in) { return relative_l2_loss(in[0], in[1]); }, {p, t});
  require_f32_matches_f64([](const std::vector<Tensor>& in) { return relative_l2_loss(in[0], in[1]); },
                          {normal({4, 5}, gen), normal({4, 5}, gen)});
  // At pred == target the loss is 0 and its grad is taken as 0, not NaN.
  Tensor same = requiring_grad(t.detach().clone());
  backward(relative_l2_loss(same, t.detach()));
  require_close(grad_of(same), Vec(6, 0.0));
}

TEST_CASE("cross_entropy: forward, gradcheck, target validation", "[dense]") {
  Generator gen(73);
  Tensor logits = requiring_grad(normal({4, 5}, gen));
  Tensor targets = from_vector({0, 4, 2, 2}, {4}, {DType::i64, Device::cpu()});
  const Vec lv = logits.to_vector();
  const std::vector<int> tv = {0, 4, 2, 2};
  double want = 0;
  for (int i = 0; i < 4; ++i) {
    double mx = -INFINITY, total = 0;
    for (int c = 0; c < 5; ++c) mx = std::max(mx, lv[i * 5 + c]);
    for (int c = 0; c < 5; ++c) total += std::exp(lv[i * 5 + c] - mx);
    want += mx + std::log(total) - lv[i * 5 + tv[i]];
  }
  require_close(cross_entropy(logits, targets), {want / 4});
  require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); }, {logits});
  require_gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(swap_last(in[0]), targets); },
                    {requiring_grad(normal({5, 4}, gen))});
  require_f32_matches_f64([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], targets); },
                          {normal({4, 5}, gen)});

  Tensor bad = from_vector({0, 5, 1, 1}, {4}, {DType::i64, Device::cpu()});
  REQUIRE_THROWS_AS(cross_entropy(logits, bad), ValueError);
  REQUIRE_THROWS_WITH(cross_entropy(logits, bad), Catch::Contains("target 5"));
  REQUIRE_THROWS_AS(cross_entropy(logits, from_vector({0, -1, 1, 1}, {4}, {DType::i64, Device::cpu()})), ValueError);
  REQUIRE_THROWS_AS(cross_entropy(logits, targets.to(DType::f64)), DTypeError);
  REQUIRE_THROWS_AS(cross_entropy(logits, from_vector({0, 1}, {2}, {DType::i64, Device::cpu()})), ShapeError);
  require_zero_size_ok([](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); },
                       {zeros({0, 5}, kF64), zeros({0}, {DType::i64, Device::cpu()})}, {});
}
