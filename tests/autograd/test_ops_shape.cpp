// Differentiable shape and indexing ops: exact forward values, fp64 gradcheck of every op (chains of views,
// multi-output split, all pad modes, repeated indices), zero-size cases, and typed errors for bad arguments.
#include <catch2/catch.hpp>

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
const TensorOptions kI64{DType::i64, Device::cpu()};

// 0, 1, 2, ... as an f64 tensor of `shape`.
Tensor iota(const Shape& shape) { return arange(0, static_cast<double>(shape_numel(shape)), 1, kF64).reshape(shape); }

Tensor leaf(const Shape& shape, Generator& gen) {
  Tensor t = randn(shape, kF64, &gen);
  set_requires_grad(t);
  return t;
}

Tensor indices(const std::vector<double>& values, const Shape& shape) { return from_vector(values, shape, kI64); }

void require_values(const Tensor& t, const Shape& shape, const std::vector<double>& want) {
  REQUIRE(t.shape() == shape);
  REQUIRE(t.to_vector() == want);
}

void require_gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(fn, inputs);
  INFO(r.report);
  REQUIRE(r.ok);
  REQUIRE(r.any_nonzero_grad);
}

}  // namespace

// ---- views ------------------------------------------------------------------------------------------------------

TEST_CASE("reshape, view, unsqueeze and squeeze regroup elements as views", "[shape]") {
  Tensor x = iota({2, 3, 4});
  Tensor r = reshape(x, {4, -1});
  require_values(r, {4, 6}, x.to_vector());
  REQUIRE(r.storage() == x.storage());
  require_values(view(x, {6, 4}), {6, 4}, x.to_vector());
  require_values(unsqueeze(x, -1), {2, 3, 4, 1}, x.to_vector());
  require_values(squeeze(unsqueeze(x, 1), 1), {2, 3, 4}, x.to_vector());
  // reshape of a non-viewable layout copies, with the same element order as the transposed view.
  Tensor t = transpose(x, 0, 2);
  require_values(reshape(t, {24}), {24}, t.contiguous().to_vector());
  REQUIRE_THROWS_AS(view(t, {24}), ShapeError);
  REQUIRE_THROWS_AS(squeeze(x, 0), ShapeError);

  Generator gen(1);
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor y = unsqueeze(reshape(in[0], {3, 8}), 1);  // (3, 1, 8)
        y = transpose(y, 0, 2);                           // (8, 1, 3): not viewable as (24)
        return std::vector<Tensor>{reshape(squeeze(y, 1), {24}), view(in[0], {6, 4})};
      },
      {leaf({2, 3, 4}, gen)});
}

TEST_CASE("permute and transpose move elements and their grads", "[shape]") {
  Tensor x = iota({2, 3, 4});
  Tensor p = permute(x, {2, 0, 1});  // p[i][j][k] = x[j][k][i]
  REQUIRE(p.shape() == Shape{4, 2, 3});
  const std::vector<double> xs = x.to_vector(), ps = p.to_vector();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) REQUIRE(ps[(i * 2 + j) * 3 + k] == xs[(j * 3 + k) * 4 + i]);
  Tensor t = transpose(x, -1, 0);  // t[i][j][k] = x[k][j][i]
  REQUIRE(t.shape() == Shape{4, 3, 2});
  REQUIRE(t.select(0, 3).select(0, 1).to_vector() == std::vector<double>{xs[1 * 4 + 3], xs[(3 + 1) * 4 + 3]});
  REQUIRE_THROWS_AS(permute(x, {0, 0, 1}), ShapeError);

  Generator gen(2);
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{permute(transpose(in[0], 0, 1), {1, 2, 0}), permute(in[0], {-1, 0, 1})};
      },
      {leaf({2, 3, 4}, gen)});
}

TEST_CASE("narrow, select and expand chains: values and grads", "[shape]") {
  Tensor x = iota({3, 4});
  require_values(narrow(x, 1, 1, 2), {3, 2}, {1, 2, 5, 6, 9, 10});
  require_values(select(x, 0, -1), {4}, {8, 9, 10, 11});
  require_values(expand(select(x, 1, 2), {2, 3}), {2, 3}, {2, 6, 10, 2, 6, 10});
  require_values(expand(narrow(x, 0, 1, 1), {2, -1, 4}), {2, 1, 4}, {4, 5, 6, 7, 4, 5, 6, 7});
  require_values(narrow(x, 0, 3, 0), {0, 4}, {});
  REQUIRE_THROWS_AS(narrow(x, 1, 3, 2), ShapeError);
  REQUIRE_THROWS_AS(select(x, 0, 3), ShapeError);
  REQUIRE_THROWS_AS(expand(x, {3, 5}), ShapeError);

  Generator gen(3);
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        // Two overlapping windows of the same input, so the grads of both paths must add up.
        Tensor a = permute(expand(select(narrow(in[0], 1, 1, 3), 0, 2), {2, 4, 3, 5}), {3, 0, 2, 1});
        Tensor b = expand(narrow(in[0], 2, 4, 1), {2, 3, 4, 3});
        return std::vector<Tensor>{a, transpose(b, 0, 3), narrow(in[0], 0, 1, 0)};
      },
      {leaf({3, 4, 5}, gen)});
}

TEST_CASE("contiguous copies strided inputs and passes the grad through", "[shape]") {
  Tensor x = iota({2, 3});
  Tensor c = contiguous(transpose(x, 0, 1));
  REQUIRE(c.is_contiguous());
  require_values(c, {3, 2}, {0, 3, 1, 4, 2, 5});

  Generator gen(4);
  Tensor w = leaf({2, 3}, gen);
  {
    NoGradGuard no_grad;
    REQUIRE_FALSE(requires_grad(contiguous(w)));
  }
  Tensor y = contiguous(w);
  REQUIRE(requires_grad(y));
  REQUIRE_FALSE(is_leaf(y));
  require_gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{contiguous(in[0]),
                                                                                   contiguous(transpose(in[0], 0, 1))}; },
                    {w});
}

// ---- cat, split --------------------------------------------------------------------------------------------------

TEST_CASE("cat joins uneven parts, zero-size ones included", "[shape]") {
  Tensor a = iota({2, 1}), b = from_vector({10, 11, 12, 13, 14, 15}, {2, 3}, kF64), empty = iota({2, 0});
  require_values(cat({a, empty, b}, 1), {2, 4}, {0, 10, 11, 12, 1, 13, 14, 15});
  require_values(cat({b, b}, -2), {4, 3}, {10, 11, 12, 13, 14, 15, 10, 11, 12, 13, 14, 15});
  require_values(cat({empty}, 1), {2, 0}, {});
  REQUIRE_THROWS_AS(cat({a, iota({2})}, 0), ShapeError);     // rank mismatch
  REQUIRE_THROWS_AS(cat({a, iota({3, 1})}, 1), ShapeError);  // non-cat dim differs
  REQUIRE_THROWS_AS(cat({a, from_vector({1, 2}, {2, 1}, kI64)}, 1), DTypeError);
  REQUIRE_THROWS_AS(cat({}, 0), ValueError);

  Generator gen(5);
  require_gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{cat({in[0], in[1], in[2]}, 1), cat({in[1], in[1]}, 0)};
      },
      {leaf({2, 1, 3}, gen), leaf({2, 0, 3}, gen), leaf({2, 4, 3}, gen)});
}

TEST_CASE("split cuts uneven views and cats the grads back", "[shape]") {
  Tensor x = iota({5, 2});
  std::vector<Tensor> parts = split(x, {2, 0, 3}, 0);
  REQUIRE(parts.size() == 3);
  require_values(parts[0], {2, 2}, {0, 1, 2, 3});
  require_values(parts[1], {0, 2}, {});
  require_values(parts[2], {3, 2}, {4, 5, 6, 7, 8, 9});
  REQUIRE(parts[2].storage() == x.storage());
  REQUIRE_THROWS_AS(split(x, {2, 2}, 0), ShapeError);
  REQUIRE_THROWS_AS(split(x, {6, -1}, 0), ValueError);

  Generator gen(6);
  require_gradcheck([](const std::vector<Tensor>& in) { return split(in[0], {1, 0, 3, 1}, -1); },
                    {leaf({2, 5}, gen)});

  // A part nobody uses gets a zero grad.
  Tensor w = leaf({4, 3}, gen);
  std::vector<Tensor> ws = split(w, {1, 3}, 0);
  backward(ws[1], ones({3, 3}, kF64));
  require_values(grad_of(w), {4, 3}, {0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1});
}

// ---- pad ---------------------------------------------------------------------------------------------------------

TEST_CASE("pad in each mode matches hand-computed values", "[shape]") {
  Tensor x = from_vector({1, 2, 3}, {1, 3}, kF64);
  require_values(pad(x, {2, 1}, PadMode::constant, 9), {1, 6}, {9, 9, 1, 2, 3, 9});
  require_values(pad(x, {2, 1}, PadMode::reflect), {1, 6}, {3, 2, 1, 2, 3, 2});
  require_values(pad(x, {2, 1}, PadMode::replicate), {1, 6}, {1, 1, 1, 2, 3, 3});
  require_values(pad(x, {2, 1}, PadMode::circular), {1, 6}, {2, 3, 1, 2, 3, 1});
  require_values(pad(x, {-1, 1}), {1, 3}, {2, 3, 0});  // negative pads crop

  // Two dims: pads list the last dim first.
  Tensor y = from_vector({1, 2, 3, 4}, {2, 2}, kF64);
  require_values(pad(y, {1, 0, 0, 1}, PadMode::replicate), {3, 3}, {1, 1, 2, 3, 3, 4, 3, 3, 4});
  require_values(pad(y, {0, 1, 1, 0}), {3, 3}, {0, 0, 0, 1, 2, 0, 3, 4, 0});
}

TEST_CASE("pad grads in all four modes over 1, 2 and 3 dims", "[shape]") {
  Generator gen(7);
  for (PadMode mode : {PadMode::constant, PadMode::reflect, PadMode::replicate, PadMode::circular}) {
    INFO("mode " << static_cast<int>(mode));
    require_gradcheck([mode](const std::vector<Tensor>& in) { return std::vector<Tensor>{pad(in[0], {2, 1}, mode, 0.5)}; },
                      {leaf({2, 4}, gen)});
    require_gradcheck(
        [mode](const std::vector<Tensor>& in) { return std::vector<Tensor>{pad(in[0], {1, 2, 2, 0}, mode)}; },
        {leaf({2, 3, 3}, gen)});
    require_gradcheck(
        [mode](const std::vector<Tensor>& in) { return std::vector<Tensor>{pad(in[0], {1, 0, 0, 1, 1, 1}, mode)}; },
        {leaf({1, 2, 2, 3}, gen)});
  }
}

TEST_CASE("pad rejects bad pads with typed errors", "[shape]") {
  Tensor x = iota({2, 3});
  REQUIRE_THROWS_AS(pad(x, {3, 0}, PadMode::reflect), ShapeError);  // reflect needs pad < size
  REQUIRE_THROWS_AS(pad(x, {0, 0, 2, 0}, PadMode::reflect), ShapeError);
  REQUIRE_THROWS_AS(pad(x, {1}), ValueError);
  REQUIRE_THROWS_AS(pad(x, {1, 1, 1, 1, 1, 1}), ShapeError);  // 3 dims padded on a rank-2 tensor
  REQUIRE_THROWS_AS(pad(x, {-2, -2}), ShapeError);            // crops more than there is
  REQUIRE_THROWS_AS(pad(iota({2, 0}), {1, 1}, PadMode::replicate), ShapeError);
  REQUIRE_THROWS_AS(pad(from_vector({1, 2}, {2}, kI64), {1, 1}), DTypeError);
  require_values(pad(iota({0, 2}), {1, 1}, PadMode::reflect), {0, 4}, {});
}

// ---- indexing ----------------------------------------------------------------------------------------------------

TEST_CASE("index_select picks rows; repeated indices accumulate grads", "[shape]") {
  Tensor x = iota({3, 4});
  require_values(index_select(x, 1, indices({3, 0, 3}, {3})), {3, 3}, {3, 0, 3, 7, 4, 7, 11, 8, 11});
  require_values(index_select(x, 0, indices({}, {0})), {0, 4}, {});

  Generator gen(8);
  Tensor idx = indices({2, 0, 2, 1, 2}, {5});
  require_gradcheck([idx](const std::vector<Tensor>& in) { return std::vector<Tensor>{index_select(in[0], -2, idx)}; },
                    {leaf({2, 3, 2}, gen)});

  REQUIRE_THROWS_AS(index_select(x, 0, indices({0, 3}, {2})), ValueError);
  REQUIRE_THROWS_AS(index_select(x, 0, indices({-1}, {1})), ValueError);
  REQUIRE_THROWS_AS(index_select(x, 0, from_vector({0}, {1}, kF64)), DTypeError);
  REQUIRE_THROWS_AS(index_select(x, 0, indices({0, 1}, {1, 2})), ShapeError);
  try {
    index_select(x, 1, indices({1, 7}, {2}));
    FAIL("expected a ValueError");
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    REQUIRE(msg.find("index_select") != std::string::npos);
    REQUIRE(msg.find("7") != std::string::npos);
  }
}

TEST_CASE("gather reads along a dim, also with an index smaller than x", "[shape]") {
  Tensor x = iota({2, 3});
  require_values(gather(x, 1, indices({2, 2, 0, 1, 0, 0}, {2, 3})), {2, 3}, {2, 2, 0, 4, 3, 3});
  require_values(gather(x, 0, indices({1, 0}, {1, 2})), {1, 2}, {3, 1});
  require_values(gather(x, 1, indices({}, {2, 0})), {2, 0}, {});

  Generator gen(9);
  Tensor idx = indices({1, 0, 1, 1, 2, 0, 2, 2, 0, 0, 1, 2}, {2, 3, 2});
  require_gradcheck([idx](const std::vector<Tensor>& in) { return std::vector<Tensor>{gather(in[0], 1, idx)}; },
                    {leaf({2, 4, 3}, gen)});

  REQUIRE_THROWS_AS(gather(x, 1, indices({0, 3}, {1, 2})), ValueError);
  REQUIRE_THROWS_AS(gather(x, 1, indices({0, 1}, {2})), ShapeError);         // rank differs
  REQUIRE_THROWS_AS(gather(x, 1, indices({0, 0, 0}, {3, 1})), ShapeError);   // larger than x in dim 0
}

TEST_CASE("scatter_add adds src at the index, differentiable in x and src", "[shape]") {
  Tensor x = iota({2, 3});
  Tensor src = from_vector({10, 20, 30, 40}, {2, 2}, kF64);
  // out[i][idx[i][j]] += src[i][j] over the 2 x 2 region the index covers.
  require_values(scatter_add(x, 1, indices({2, 2, 0, 1}, {2, 2}), src), {2, 3}, {0, 1, 32, 33, 44, 5});
  require_values(scatter_add(x, 0, indices({1, 1}, {1, 2}), src), {2, 3}, {0, 1, 2, 13, 24, 5});
  require_values(x, {2, 3}, {0, 1, 2, 3, 4, 5});  // the input is untouched
  require_values(scatter_add(x, 0, indices({}, {0, 2}), src), {2, 3}, {0, 1, 2, 3, 4, 5});

  Generator gen(10);
  Tensor idx = indices({0, 2, 2, 1, 0, 0}, {3, 2});
  require_gradcheck(
      [idx](const std::vector<Tensor>& in) { return std::vector<Tensor>{scatter_add(in[0], 1, idx, in[1])}; },
      {leaf({3, 3}, gen), leaf({3, 3}, gen)});  // src larger than the index in dim 1

  REQUIRE_THROWS_AS(scatter_add(x, 1, indices({3}, {1, 1}), src), ValueError);
  REQUIRE_THROWS_AS(scatter_add(x, 1, indices({0, 0, 0}, {1, 3}), src), ShapeError);  // index larger than src
}
