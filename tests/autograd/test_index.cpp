// autograd/ops/index: index_select, gather and scatter_add: exact values, repeated indices accumulating grads,
// gradcheck in x and src.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

// ---- indexing ----------------------------------------------------------------------------------------------------

TEST_CASE("index_select picks rows; repeated indices accumulate grads", "[shape]") {
  Tensor x = iota({3, 4});
  require_exact(index_select(x, 1, indices({3, 0, 3}, {3})), {3, 3}, {3, 0, 3, 7, 4, 7, 11, 8, 11});
  require_exact(index_select(x, 0, indices({}, {0})), {0, 4}, {});

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
  require_exact(gather(x, 1, indices({2, 2, 0, 1, 0, 0}, {2, 3})), {2, 3}, {2, 2, 0, 4, 3, 3});
  require_exact(gather(x, 0, indices({1, 0}, {1, 2})), {1, 2}, {3, 1});
  require_exact(gather(x, 1, indices({}, {2, 0})), {2, 0}, {});

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
  require_exact(scatter_add(x, 1, indices({2, 2, 0, 1}, {2, 2}), src), {2, 3}, {0, 1, 32, 33, 44, 5});
  require_exact(scatter_add(x, 0, indices({1, 1}, {1, 2}), src), {2, 3}, {0, 1, 2, 13, 24, 5});
  require_exact(x, {2, 3}, {0, 1, 2, 3, 4, 5});  // the input is untouched
  require_exact(scatter_add(x, 0, indices({}, {0, 2}), src), {2, 3}, {0, 1, 2, 3, 4, 5});

  Generator gen(10);
  Tensor idx = indices({0, 2, 2, 1, 0, 0}, {3, 2});
  require_gradcheck(
      [idx](const std::vector<Tensor>& in) { return std::vector<Tensor>{scatter_add(in[0], 1, idx, in[1])}; },
      {leaf({3, 3}, gen), leaf({3, 3}, gen)});  // src larger than the index in dim 1

  REQUIRE_THROWS_AS(scatter_add(x, 1, indices({3}, {1, 1}), src), ValueError);
  REQUIRE_THROWS_AS(scatter_add(x, 1, indices({0, 0, 0}, {1, 3}), src), ShapeError);  // index larger than src
}
