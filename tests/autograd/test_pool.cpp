// autograd/ops/pool: avg_pool and max_pool on hand-computed windows, gradcheck in 1, 2 and 3 d, bad windows.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

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

}  // namespace

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
