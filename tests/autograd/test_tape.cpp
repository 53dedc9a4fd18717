// The tape engine: grad accumulation, shared inputs, freed graphs and retain_graph, no-grad scopes, caller-owned
// grad buffers, root checks, and multi-output nodes whose unused outputs receive zero grads.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

Tensor leaf(const Vec& values) {
  Tensor t = from_vector(values, {static_cast<int64_t>(values.size())}, kF64);
  set_requires_grad(t);
  return t;
}

void require_values(const Tensor& t, const Vec& want) {
  REQUIRE(t.defined());
  require_close(t.to_vector(), want, 1e-12);
}

// A two-output op, (2 x, x^2), written like any other op; its backward records how many calls saw a defined
// grad for the second output.
struct TwoOutputsCtx {
  Tensor x;
  int* second_grad_defined;
};

std::vector<Tensor> two_outputs_backward(TwoOutputsCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  if (grad_outputs[1].defined()) ++*ctx.second_grad_defined;
  // d/dx (2x . g0 + x^2 . g1) = 2 g0 + 2 x g1
  return {add(mul_scalar(grad_outputs[0], 2.0), mul(mul_scalar(ctx.x, 2.0), grad_outputs[1]))};
}

std::vector<Tensor> two_outputs(const Tensor& x, int* second_grad_defined) {
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = {mul_scalar(x, 2.0), mul(x, x)};
  }
  return record("two_outputs", {x}, outs, TwoOutputsCtx{x.detach(), second_grad_defined}, two_outputs_backward);
}

}  // namespace

TEST_CASE("grads accumulate over two backward calls", "[tape]") {
  Tensor x = leaf({1, 2, 3});
  backward(sum(mul(x, x)));
  require_values(grad_of(x), {2, 4, 6});
  backward(sum(mul_scalar(x, 3.0)));
  require_values(grad_of(x), {5, 7, 9});
  zero_grad(x);
  REQUIRE_FALSE(grad_of(x).defined());
}

TEST_CASE("a tensor used on two paths receives the sum of both grads", "[tape]") {
  // y = 2x + exp(x) (diamond: x feeds both branches, which meet in add)
  Tensor x = leaf({0.5, -1.0});
  Tensor y = add(mul_scalar(x, 2.0), exp(x));
  backward(y, from_vector({1.0, 3.0}, {2}, kF64));
  require_values(grad_of(x), {2 + std::exp(0.5), 3 * (2 + std::exp(-1.0))});

  // z = x * x through one node with x as both inputs
  Tensor x2 = leaf({1.5});
  backward(sum(mul(x2, x2)));
  require_values(grad_of(x2), {3.0});
}

TEST_CASE("a second backward through freed buffers throws, retain_graph keeps them", "[tape]") {
  Tensor x = leaf({1, 2});
  Tensor y = sum(mul(x, x));
  backward(y);
  REQUIRE_THROWS_AS(backward(y), AutogradError);

  Tensor x2 = leaf({1, 2});
  Tensor y2 = sum(mul(x2, x2));
  backward(y2, Tensor(), /*retain_graph=*/true);
  backward(y2);
  require_values(grad_of(x2), {4, 8});
  REQUIRE_THROWS_AS(backward(y2), AutogradError);
}

TEST_CASE("NoGradGuard records nothing and restores grad mode", "[tape]") {
  Tensor x = leaf({1, 2});
  REQUIRE(grad_mode_enabled());
  Tensor y;
  {
    NoGradGuard no_grad;
    REQUIRE_FALSE(grad_mode_enabled());
    y = exp(mul(x, x));
    {
      NoGradGuard nested;
    }
    REQUIRE_FALSE(grad_mode_enabled());
  }
  REQUIRE(grad_mode_enabled());
  REQUIRE_FALSE(requires_grad(y));
  REQUIRE(is_leaf(y));
  REQUIRE_THROWS_AS(backward(sum(y)), AutogradError);
  REQUIRE(requires_grad(exp(x)));
}

TEST_CASE("bind_grad accumulates into a caller's buffer view and zero_grad zeroes it in place", "[tape]") {
  Tensor arena = zeros({8}, kF64);
  Tensor view = arena.narrow(0, 2, 3);
  Tensor w = leaf({1, 2, 3});
  bind_grad(w, view);
  const Tensor c = from_vector({0.5, -1.0, 2.0}, {3}, kF64);

  backward(sum(mul(w, c)));
  require_values(arena, {0, 0, 0.5, -1, 2, 0, 0, 0});
  backward(sum(mul(w, c)));
  require_values(arena, {0, 0, 1, -2, 4, 0, 0, 0});
  REQUIRE(grad_of(w).is_same(view));

  zero_grad(w);
  require_values(arena, Vec(8, 0.0));
  REQUIRE(grad_of(w).is_same(view));
  backward(sum(mul_scalar(w, 3.0)));
  require_values(arena, {0, 0, 3, 3, 3, 0, 0, 0});

  REQUIRE_THROWS_AS(bind_grad(w, arena.narrow(0, 0, 2)), AutogradError);
}

TEST_CASE("backward on a non-scalar root needs an explicit grad", "[tape]") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = exp(x);
  REQUIRE_THROWS_AS(backward(y), AutogradError);
  REQUIRE_THROWS_AS(backward(y, ones({2}, kF64)), ShapeError);
  backward(y, ones({3}, kF64));
  require_values(grad_of(x), {std::exp(1.0), std::exp(2.0), std::exp(3.0)});
  REQUIRE_THROWS_AS(backward(from_vector({1.0}, {1}, kF64)), AutogradError);
}

TEST_CASE("multi-output nodes: an unused output gets a zero grad, used outputs add up", "[tape]") {
  int second_defined = 0;
  Tensor x = leaf({1.0, -2.0});
  auto outs = two_outputs(x, &second_defined);
  REQUIRE(requires_grad(outs[0]));
  REQUIRE(requires_grad(outs[1]));
  backward(sum(outs[0]));  // outs[1] unused
  REQUIRE(second_defined == 1);
  require_values(grad_of(x), {2, 2});

  zero_grad(x);
  outs = two_outputs(x, &second_defined);
  backward({outs[0], outs[1]}, {ones({2}, kF64), from_vector({1.0, 1.0}, {2}, kF64)});
  require_values(grad_of(x), {4, -2});

  zero_grad(x);
  outs = two_outputs(x, &second_defined);
  backward(add(sum(outs[1]), sum(mul(outs[0], outs[1]))));
  // d/dx [x^2 + 2x^3] = 2x + 6x^2
  require_values(grad_of(x), {8, 20});

  GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return two_outputs(in[0], &second_defined); },
                                {leaf({0.3, -0.7, 1.1})});
  INFO(r.report);
  REQUIRE(r.ok);
  REQUIRE(r.any_nonzero_grad);
}

namespace {
// An identity op whose backward appends its label to a log: shows the order in which the engine runs nodes.
struct LoggedCtx {
  int label;
  std::vector<int>* log;
};
std::vector<Tensor> logged_backward(LoggedCtx& ctx, const std::vector<Tensor>& g) {
  ctx.log->push_back(ctx.label);
  return {g[0]};
}
Tensor logged(const Tensor& x, int label, std::vector<int>* log) {
  return record("logged", {x}, x.clone(), LoggedCtx{label, log}, logged_backward);
}
}  // namespace

TEST_CASE("backward runs nodes in exactly the reverse of their recording order", "[tape]") {
  // Two independent chains whose recording interleaves, and a chain whose length differs: whatever the graph's
  // shape (which differs between ranks when one has extra local-only nodes), nodes with collectives must run
  // in the same relative order everywhere, so the engine follows the recording order, not the graph's shape.
  std::vector<int> log;
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  Tensor a1 = logged(a, 1, &log);
  Tensor b1 = logged(b, 2, &log);
  Tensor a2 = logged(a1, 3, &log);
  Tensor a3 = logged(a2, 4, &log);
  Tensor b2 = logged(b1, 5, &log);
  Tensor total = add(sum(a3), sum(b2));
  backward(total);
  CHECK(log == std::vector<int>{5, 4, 3, 2, 1});
  require_values(grad_of(a), {1, 1});
  require_values(grad_of(b), {1, 1});
}

// ---- leaf-grad-ready hook ------------------------------------------------------------------------------------

namespace {
// Which of `leaves` a hook call is about, and that leaf's grad at the moment of the call.
struct ReadyCall {
  int leaf;
  Vec grad;
};
LeafGradReadyHook::Callback recorder(const std::vector<Tensor>& leaves, std::vector<ReadyCall>& calls) {
  return [&leaves, &calls](AutogradMeta& m) {
    int which = -1;
    for (size_t i = 0; i < leaves.size(); ++i)
      if (leaves[i].autograd_meta().get() == &m) which = static_cast<int>(i);
    calls.push_back({which, m.grad.defined() ? m.grad.to_vector() : Vec{}});
  };
}
}  // namespace

TEST_CASE("leaf-grad-ready hook: once per leaf, in readiness order, only after the last contribution", "[tape]") {
  // loss = sum((a * b) * c + a): backward runs sum, add (a's first grad), the outer mul (c final), then the inner
  // mul (a's second grad: a and b final), so the order is c, a, b and a is announced only with both grads in.
  Tensor a = leaf({1, 2}), b = leaf({3, 4}), c = leaf({5, 6});
  Tensor k = from_vector({7, 8}, {2}, kF64);  // a constant: never announced
  const std::vector<Tensor> leaves = {a, b, c};
  std::vector<ReadyCall> calls;
  {
    LeafGradReadyHook hook(recorder(leaves, calls));
    backward(sum(add(mul(mul(mul(a, b), c), k), a)));
  }
  REQUIRE(calls.size() == 3);
  CHECK(calls[0].leaf == 2);
  CHECK(calls[1].leaf == 0);
  CHECK(calls[2].leaf == 1);
  require_close(calls[0].grad, {1 * 3 * 7, 2 * 4 * 8}, 0);         // dc = a b k
  require_close(calls[1].grad, {3 * 5 * 7 + 1, 4 * 6 * 8 + 1}, 0); // da = b c k + 1: both contributions in
  require_close(calls[2].grad, {1 * 5 * 7, 2 * 6 * 8}, 0);         // db = a c k
  // Each announced grad is the final one.
  for (const ReadyCall& r : calls) require_close(r.grad, grad_of(leaves[r.leaf]).to_vector(), 0);

  // Gone with its scope: another backward calls nothing.
  backward(sum(mul(a, b)));
  CHECK(calls.size() == 3);
}

TEST_CASE("leaf-grad-ready hook: a leaf used twice by one node, root leaves, and two hooks in order", "[tape]") {
  Tensor x = leaf({1.5}), r = leaf({2, 3});
  const std::vector<Tensor> leaves = {x, r};
  std::vector<ReadyCall> first, second;
  std::vector<int> order;  // 1 and 2 per call, to see that the hooks run in the order they were made
  LeafGradReadyHook h1([&](AutogradMeta& m) {
    recorder(leaves, first)(m);
    order.push_back(1);
  });
  LeafGradReadyHook h2([&](AutogradMeta& m) {
    recorder(leaves, second)(m);
    order.push_back(2);
  });
  backward(sum(mul(x, x)));  // one node, two edges into x: announced once, after both
  REQUIRE(first.size() == 1);
  CHECK(first[0].leaf == 0);
  require_close(first[0].grad, {3.0}, 0);
  CHECK(order == std::vector<int>{1, 2});
  // A leaf root is final as soon as it is seeded.
  backward(r, from_vector({0.5, -1}, {2}, kF64));
  REQUIRE(first.size() == 2);
  CHECK(first[1].leaf == 1);
  require_close(first[1].grad, {0.5, -1}, 0);
  CHECK(second.size() == 2);
  // A leaf that is a root and also fed by a node: announced once, after the node's grad.
  Tensor z = leaf({4});
  const std::vector<Tensor> zs = {z};
  std::vector<ReadyCall> zcalls;
  LeafGradReadyHook hz(recorder(zs, zcalls));
  Tensor y = mul_scalar(z, 3.0);
  backward({z, y}, {from_vector({1}, {1}, kF64), from_vector({1}, {1}, kF64)});
  REQUIRE(zcalls.size() == 1);
  require_close(zcalls[0].grad, {4.0}, 0);
}
