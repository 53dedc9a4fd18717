// Typed errors across the dense op families: bad dtypes, mismatched shapes, out-of-range dims and undefined
// tensors, each naming the op and the offending tensor.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

TEST_CASE("dense ops reject bad dtypes, shapes and dims with typed errors", "[dense]") {
  Generator gen(81);
  const Tensor i64 = zeros({2, 3}, {DType::i64, Device::cpu()});
  const Tensor f32 = zeros({2, 3}, {DType::f32, Device::cpu()});
  const Tensor f64 = normal({2, 3}, gen);

  REQUIRE_THROWS_AS(exp(i64), DTypeError);
  REQUIRE_THROWS_AS(sum(i64), DTypeError);
  REQUIRE_THROWS_AS(softmax(i64, 0), DTypeError);
  REQUIRE_THROWS_AS(add(f32, f64), DTypeError);
  REQUIRE_THROWS_AS(matmul(f32, f64.transpose(0, 1)), DTypeError);
  REQUIRE_THROWS_AS(where(gt(f64, f64), f32, f64), DTypeError);
  REQUIRE_THROWS_AS(where(f64, f64, f64), DTypeError);
  REQUIRE_THROWS_AS(linear(f64, zeros({4, 3}, {DType::f32, Device::cpu()})), DTypeError);
  REQUIRE_THROWS_AS(layer_norm(f64, {3}, f32), DTypeError);
  REQUIRE_THROWS_AS(lt(i64, i64), DTypeError);

  REQUIRE_THROWS_AS(add(f64, normal({4}, gen)), ShapeError);
  REQUIRE_THROWS_WITH(add(f64, normal({4}, gen)), Catch::Contains("add") && Catch::Contains("f64[2, 3] cpu"));
  REQUIRE_THROWS_AS(mul(f64, normal({3, 3}, gen)), ShapeError);
  REQUIRE_THROWS_AS(where(gt(normal({4}, gen), normal({4}, gen)), f64, f64), ShapeError);
  REQUIRE_THROWS_AS(matmul(f64, f64), ShapeError);
  REQUIRE_THROWS_WITH(matmul(f64, f64), Catch::Contains("matmul") && Catch::Contains("f64[2, 3] cpu"));
  REQUIRE_THROWS_AS(matmul(full({}, 1.0, kF64), f64), ShapeError);
  REQUIRE_THROWS_AS(linear(f64, normal({4, 2}, gen)), ShapeError);
  REQUIRE_THROWS_AS(linear(f64, normal({4, 3}, gen), normal({3}, gen)), ShapeError);
  REQUIRE_THROWS_AS(layer_norm(f64, {2}), ShapeError);
  REQUIRE_THROWS_AS(layer_norm(f64, {3}, normal({2}, gen)), ShapeError);
  REQUIRE_THROWS_AS(layer_norm(f64, {}), ShapeError);
  REQUIRE_THROWS_AS(group_norm(normal({2, 6, 2}, gen), 4), ShapeError);
  REQUIRE_THROWS_AS(group_norm(normal({2, 6, 2}, gen), 0), ValueError);
  REQUIRE_THROWS_AS(group_norm(normal({6}, gen), 2), ShapeError);
  REQUIRE_THROWS_AS(group_norm(normal({2, 6, 2}, gen), 2, normal({3}, gen)), ShapeError);
  REQUIRE_THROWS_AS(mse_loss(f64, normal({3, 2}, gen)), ShapeError);
  REQUIRE_THROWS_AS(relative_l2_loss(f64, normal({6}, gen)), ShapeError);

  REQUIRE_THROWS_AS(sum(f64, {2}), ShapeError);
  REQUIRE_THROWS_WITH(sum(f64, {2}), Catch::Contains("sum") && Catch::Contains("f64[2, 3] cpu"));
  REQUIRE_THROWS_AS(mean(f64, {-3}), ShapeError);
  REQUIRE_THROWS_AS(amax(f64, {1, -1}), ShapeError);
  REQUIRE_THROWS_AS(logsumexp(f64, {5}), ShapeError);
  REQUIRE_THROWS_AS(argmax(f64, 2), ShapeError);
  REQUIRE_THROWS_AS(softmax(f64, 2), ShapeError);
  REQUIRE_THROWS_AS(log_softmax(f64, -3), ShapeError);

  REQUIRE_THROWS_AS(exp(Tensor()), ValueError);
  REQUIRE_THROWS_AS(add(f64, Tensor()), ValueError);
}
