// autograd/ops/reduce: sum, mean, amax, amin, logsumexp and argmax: forward against loops over dim sets, keepdim
// and negative dims, gradcheck, the first-extreme grad rule, zero-size tensors.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

struct ReduceCase {
  const char* name;
  Tensor (*op)(const Tensor&, const std::vector<int>&, bool);
  Ref ref;
};

const std::vector<ReduceCase>& reduce_cases() {
  static const std::vector<ReduceCase> cases = {{"sum", sum, Ref::sum},
                                                {"mean", mean, Ref::mean},
                                                {"amax", amax, Ref::max},
                                                {"amin", amin, Ref::min},
                                                {"logsumexp", logsumexp, Ref::logsumexp}};
  return cases;
}

// The shape a reduction of `shape` over `dims` should have.
Shape reduced_shape(const Shape& shape, std::vector<int> dims, bool keepdim) {
  const int nd = static_cast<int>(shape.size());
  std::vector<bool> reduced(nd, dims.empty());
  for (int d : dims) reduced[d < 0 ? d + nd : d] = true;
  Shape out;
  for (int d = 0; d < nd; ++d)
    if (!reduced[d]) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  return out;
}

}  // namespace

TEST_CASE("reductions: forward values and gradcheck over dim sets, keepdim, negative dims", "[dense]") {
  Generator gen(31);
  const Shape shape{2, 3, 4};
  const std::vector<std::vector<int>> dim_sets = {{}, {1}, {-1}, {0, 2}, {1, 2}, {-3, 1}, {0, 1, 2}};
  for (const ReduceCase& c : reduce_cases()) {
    for (const auto& dims : dim_sets) {
      for (bool keepdim : {false, true}) {
        INFO(c.name << " dims " << dims.size() << (dims.empty() ? "" : " first " + std::to_string(dims[0]))
                    << " keepdim " << keepdim);
        Tensor x = requiring_grad(normal(shape, gen));
        Tensor y = c.op(x, dims, keepdim);
        REQUIRE(y.shape() == reduced_shape(shape, dims, keepdim));
        require_close(y, ref_reduce(x, dims, c.ref));
        require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0], dims, keepdim); }, {x});
      }
    }
    INFO(c.name << " of a transposed input");
    Tensor x = normal({3, 4}, gen);
    require_close(c.op(x.transpose(0, 1), {0}, false), ref_reduce(x.transpose(0, 1), {0}, c.ref));
    require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(swap_last(in[0]), {0}, false); },
                      {requiring_grad(normal({3, 4}, gen))});
    require_f32_matches_f64([&](const std::vector<Tensor>& in) { return c.op(in[0], {0, 2}, false); },
                            {normal(shape, gen)});
  }
}

TEST_CASE("amax and amin send the grad to the first extreme element", "[dense]") {
  Tensor x = requiring_grad(from_vector({1, 3, 3, 0, -2, -2}, {2, 3}, kF64));
  backward(amax(x, {1}), from_vector({1.0, 2.0}, {2}, kF64));
  require_close(grad_of(x), {0, 1, 0, 2, 0, 0});
  zero_grad(x);
  backward(amin(x, {-1}), from_vector({1.0, 2.0}, {2}, kF64));
  require_close(grad_of(x), {1, 0, 0, 0, 2, 0});
}

TEST_CASE("reductions: zero-size tensors", "[dense]") {
  // Reducing a dim of size 0: sum gives zeros, mean NaN, logsumexp -inf; amax/amin have no answer.
  Tensor x = zeros({0, 3}, kF64);
  require_close(sum(x, {0}), {0, 0, 0});
  REQUIRE(std::isnan(mean(x, {0}).to_vector()[0]));
  REQUIRE(logsumexp(x, {0}).to_vector()[0] == -INFINITY);
  REQUIRE_THROWS_AS(amax(x, {0}), ShapeError);
  REQUIRE_THROWS_AS(amin(x), ShapeError);
  for (const ReduceCase& c : reduce_cases()) {
    INFO(c.name);
    // Reducing a non-empty dim of an empty tensor gives an empty result.
    require_zero_size_ok([&](const std::vector<Tensor>& in) { return c.op(in[0], {1}, false); },
                         {zeros({0, 3}, kF64)}, {0});
  }
  require_zero_size_ok([](const std::vector<Tensor>& in) { return sum(in[0]); }, {zeros({0, 3}, kF64)}, {});
  require_zero_size_ok([](const std::vector<Tensor>& in) { return sum(in[0], {0}, true); }, {zeros({0, 3}, kF64)},
                       {1, 3});
}

TEST_CASE("argmax: first maximum, keepdim, negative dims, no grad", "[dense]") {
  Tensor x = requiring_grad(from_vector({1, 5, 5, 7, 2, 7}, {2, 3}, kF64));
  Tensor i = argmax(x, 1);
  REQUIRE(i.dtype() == DType::i64);
  REQUIRE(i.shape() == Shape{2});
  REQUIRE_FALSE(requires_grad(i));
  require_close(i, {1, 0});
  require_close(argmax(x, 0, true), {1, 0, 1});
  REQUIRE(argmax(x, 0, true).shape() == Shape{1, 3});
  require_close(argmax(x, -1), {1, 0});
  require_close(argmax(x.transpose(0, 1), 1), {1, 0, 1});
  REQUIRE_THROWS_AS(argmax(zeros({2, 0}, kF64), 1), ShapeError);
  REQUIRE(argmax(zeros({0, 3}, kF64), 1).shape() == Shape{0});
}
