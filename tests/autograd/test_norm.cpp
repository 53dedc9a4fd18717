// autograd/ops/norm: layer_norm and group_norm forward against the fp64 two-pass reference, gradcheck with and
// without parameters, strided, zero-size and f32 inputs.
#include "tests/autograd/op_testing.h"

using namespace shardrt;
using namespace shardrt::test;

TEST_CASE("layer_norm: forward against loops, gradcheck with and without parameters", "[dense]") {
  Generator gen(61);
  const double eps = 1e-5;
  for (const Shape& ns : {Shape{4}, Shape{3, 4}}) {
    for (bool affine : {true, false}) {
      INFO("normalized_shape " << shape_str(ns) << " affine " << affine);
      Tensor x = requiring_grad(normal({2, 3, 4}, gen));
      Tensor w = affine ? requiring_grad(normal(ns, gen)) : Tensor();
      Tensor b = affine ? requiring_grad(normal(ns, gen)) : Tensor();
      const int64_t D = shape_numel(ns);
      const Vec wv = affine ? w.to_vector() : Vec(D, 1.0), bv = affine ? b.to_vector() : Vec(D, 0.0);
      const Vec xv = x.to_vector();
      const Vec want = ref_norm(xv, x.numel() / D, D, &wv, &bv, eps, [&](int64_t i) { return i % D; }).y;
      require_close(layer_norm(x, ns, w, b, eps), want, 1e-10);
      require_gradcheck([&](const std::vector<Tensor>& in) { return layer_norm(in[0], ns, in[1], in[2], eps); },
                        {x, w, b});
    }
  }
  require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(swap_last(in[0]), {3}, in[1], Tensor()); },
                    {requiring_grad(normal({2, 3, 2}, gen)), requiring_grad(normal({3}, gen))});
  require_zero_size_ok([](const std::vector<Tensor>& in) { return layer_norm(in[0], {4}, in[1], in[2]); },
                       {zeros({0, 4}, kF64), ones({4}, kF64), zeros({4}, kF64)}, {0, 4});
  require_f32_matches_f64([](const std::vector<Tensor>& in) { return layer_norm(in[0], {8}, in[1], in[2]); },
                          {normal({3, 8}, gen), normal({8}, gen), normal({8}, gen)});
}

TEST_CASE("group_norm: forward against loops, gradcheck, spatial ranks", "[dense]") {
  Generator gen(62);
  const double eps = 1e-5;
  const std::vector<std::pair<Shape, int64_t>> cases = {{{2, 4, 3}, 2}, {{2, 6, 2, 2}, 3}, {{2, 4}, 2}, {{1, 4, 3}, 1}};
  for (const auto& [xs, groups] : cases) {
    for (bool affine : {true, false}) {
      INFO("x " << shape_str(xs) << " groups " << groups << " affine " << affine);
      const int64_t C = xs[1], S = shape_numel(xs) / (xs[0] * C);
      Tensor x = requiring_grad(normal(xs, gen));
      Tensor w = affine ? requiring_grad(normal({C}, gen)) : Tensor();
      Tensor b = affine ? requiring_grad(normal({C}, gen)) : Tensor();
      const Vec wv = affine ? w.to_vector() : Vec(C, 1.0), bv = affine ? b.to_vector() : Vec(C, 0.0);
      const auto channel = [&](int64_t i) { return (i / S) % C; };
      const Vec xv = x.to_vector();
      const int64_t block = (C / groups) * S;
      const Vec want = ref_norm(xv, x.numel() / block, block, &wv, &bv, eps, channel).y;
      require_close(group_norm(x, groups, w, b, eps), want, 1e-10);
      require_gradcheck([&](const std::vector<Tensor>& in) { return group_norm(in[0], groups, in[1], in[2], eps); },
                        {x, w, b});
    }
  }
  require_zero_size_ok([](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2]); },
                       {zeros({0, 4, 3}, kF64), ones({4}, kF64), zeros({4}, kF64)}, {0, 4, 3});
  require_f32_matches_f64([](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2]); },
                          {normal({2, 4, 5}, gen), normal({4}, gen), normal({4}, gen)});
}
