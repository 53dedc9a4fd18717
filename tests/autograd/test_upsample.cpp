// autograd/ops/upsample: nearest and linear upsampling against PyTorch's source-index rules, gradcheck in 1, 2
// and 3 d with both align_corners, bad sizes.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

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
