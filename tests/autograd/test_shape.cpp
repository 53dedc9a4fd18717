// autograd/ops/shape: views (reshape, view, squeeze, permute, transpose, narrow, select, expand), contiguous,
// cat, split and pad in every mode: exact values, fp64 gradcheck, zero-size parts, typed errors.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

// ---- views ------------------------------------------------------------------------------------------------------

TEST_CASE("reshape, view, unsqueeze and squeeze regroup elements as views", "[shape]") {
  Tensor x = iota({2, 3, 4});
  Tensor r = reshape(x, {4, -1});
  require_exact(r, {4, 6}, x.to_vector());
  REQUIRE(r.storage() == x.storage());
  require_exact(view(x, {6, 4}), {6, 4}, x.to_vector());
  require_exact(unsqueeze(x, -1), {2, 3, 4, 1}, x.to_vector());
  require_exact(squeeze(unsqueeze(x, 1), 1), {2, 3, 4}, x.to_vector());
  // reshape of a non-viewable layout copies, with the same element order as the transposed view.
  Tensor t = transpose(x, 0, 2);
  require_exact(reshape(t, {24}), {24}, t.contiguous().to_vector());
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
  require_exact(narrow(x, 1, 1, 2), {3, 2}, {1, 2, 5, 6, 9, 10});
  require_exact(select(x, 0, -1), {4}, {8, 9, 10, 11});
  require_exact(expand(select(x, 1, 2), {2, 3}), {2, 3}, {2, 6, 10, 2, 6, 10});
  require_exact(expand(narrow(x, 0, 1, 1), {2, -1, 4}), {2, 1, 4}, {4, 5, 6, 7, 4, 5, 6, 7});
  require_exact(narrow(x, 0, 3, 0), {0, 4}, {});
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
  require_exact(c, {3, 2}, {0, 3, 1, 4, 2, 5});

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
  require_exact(cat({a, empty, b}, 1), {2, 4}, {0, 10, 11, 12, 1, 13, 14, 15});
  require_exact(cat({b, b}, -2), {4, 3}, {10, 11, 12, 13, 14, 15, 10, 11, 12, 13, 14, 15});
  require_exact(cat({empty}, 1), {2, 0}, {});
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
  require_exact(parts[0], {2, 2}, {0, 1, 2, 3});
  require_exact(parts[1], {0, 2}, {});
  require_exact(parts[2], {3, 2}, {4, 5, 6, 7, 8, 9});
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
  require_exact(grad_of(w), {4, 3}, {0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1});
}

// ---- pad ---------------------------------------------------------------------------------------------------------

TEST_CASE("pad in each mode matches hand-computed values", "[shape]") {
  Tensor x = from_vector({1, 2, 3}, {1, 3}, kF64);
  require_exact(pad(x, {2, 1}, PadMode::constant, 9), {1, 6}, {9, 9, 1, 2, 3, 9});
  require_exact(pad(x, {2, 1}, PadMode::reflect), {1, 6}, {3, 2, 1, 2, 3, 2});
  require_exact(pad(x, {2, 1}, PadMode::replicate), {1, 6}, {1, 1, 1, 2, 3, 3});
  require_exact(pad(x, {2, 1}, PadMode::circular), {1, 6}, {2, 3, 1, 2, 3, 1});
  require_exact(pad(x, {-1, 1}), {1, 3}, {2, 3, 0});  // negative pads crop

  // Two dims: pads list the last dim first.
  Tensor y = from_vector({1, 2, 3, 4}, {2, 2}, kF64);
  require_exact(pad(y, {1, 0, 0, 1}, PadMode::replicate), {3, 3}, {1, 1, 2, 3, 3, 4, 3, 3, 4});
  require_exact(pad(y, {0, 1, 1, 0}), {3, 3}, {0, 0, 0, 1, 2, 0, 3, 4, 0});
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
  require_exact(pad(iota({0, 2}), {1, 1}, PadMode::reflect), {0, 4}, {});
}
