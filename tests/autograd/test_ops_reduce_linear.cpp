// Dense local ops, part 2: reductions, softmax, matmul/bmm/linear, norms and losses: forward values against
// plain loops, fp64 gradchecks (keepdim, negative dims, zero-size tensors), typed errors, f32 against f64.
#include "ops_dense_testing.h"
// ==== reductions ==================================================================================================

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

// ==== softmax =====================================================================================================

TEST_CASE("softmax and log_softmax: forward, gradcheck over dims, strided and zero-size inputs", "[dense]") {
  Generator gen(41);
  for (bool log : {false, true}) {
    auto op = [log](const Tensor& x, int dim) { return log ? log_softmax(x, dim) : softmax(x, dim); };
    for (int dim : {0, 1, 2, -1, -2}) {
      INFO((log ? "log_softmax" : "softmax") << " dim " << dim);
      Tensor x = requiring_grad(normal({2, 3, 4}, gen));
      require_close(op(x, dim), ref_softmax(x, dim, log));
      require_gradcheck([&](const std::vector<Tensor>& in) { return op(in[0], dim); }, {x});
    }
    Tensor x = normal({3, 4}, gen);
    require_close(op(x.transpose(0, 1), 1), ref_softmax(x.transpose(0, 1), 1, log));
    require_gradcheck([&](const std::vector<Tensor>& in) { return op(swap_last(in[0]), -1); },
                      {requiring_grad(normal({3, 4}, gen))});
    require_zero_size_ok([&](const std::vector<Tensor>& in) { return op(in[0], 1); }, {zeros({0, 4}, kF64)}, {0, 4});
    require_f32_matches_f64([&](const std::vector<Tensor>& in) { return op(in[0], 1); }, {normal({3, 5}, gen)});
  }
}

// ==== matmul, bmm, linear =========================================================================================

TEST_CASE("matmul: NumPy cases, forward against loops and gradcheck", "[dense]") {
  Generator gen(51);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3}, {3}},                // dot
      {{3}, {3, 2}},             // vector x matrix
      {{2, 3}, {3}},             // matrix x vector
      {{2, 3}, {3, 4}},          // plain GEMM
      {{2, 2, 3}, {3, 4}},       // shared right operand
      {{2, 3}, {2, 3, 4}},       // shared left operand
      {{2, 1, 2, 3}, {3, 3, 2}}, // batch dims broadcast both ways
      {{3}, {2, 3, 2}},          // vector x batch
      {{2, 2, 3}, {3}},          // batch x vector
      {{1, 2, 3}, {2, 3, 2}},    // unit batch on the left
  };
  for (const auto& [sa, sb] : cases) {
    INFO(shape_str(sa) << " x " << shape_str(sb));
    Tensor a = requiring_grad(normal(sa, gen)), b = requiring_grad(normal(sb, gen));
    Tensor c = matmul(a, b);
    const auto [want, want_shape] = ref_matmul(a, b);
    REQUIRE(c.shape() == want_shape);
    require_close(c, want);
    require_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a, b});
  }
  INFO("transposed operands");
  Tensor a = normal({3, 2}, gen), b = normal({4, 3}, gen);
  require_close(matmul(a.transpose(0, 1), b.transpose(0, 1)), ref_matmul(a.transpose(0, 1), b.transpose(0, 1)).first);
  require_gradcheck([](const std::vector<Tensor>& in) { return matmul(swap_last(in[0]), swap_last(in[1])); },
                    {requiring_grad(a.clone()), requiring_grad(b.clone())});
  require_f32_matches_f64([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                          {normal({2, 3, 5}, gen), normal({5, 4}, gen)});
}

TEST_CASE("matmul: grads only for the operand that needs one", "[dense]") {
  Generator gen(52);
  Tensor w = requiring_grad(normal({3, 2}, gen));
  Tensor x = normal({4, 2, 3}, gen);
  require_gradcheck([&](const std::vector<Tensor>& in) { return matmul(x, in[0]); }, {w});
  Tensor v = normal({2, 3}, gen);
  require_gradcheck([&](const std::vector<Tensor>& in) { return matmul(in[0], v); },
                    {requiring_grad(normal({4, 3, 2}, gen))});
}

TEST_CASE("matmul: zero-size operands", "[dense]") {
  require_zero_size_ok([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                       {zeros({0, 3}, kF64), zeros({3, 2}, kF64)}, {0, 2});
  require_zero_size_ok([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                       {zeros({2, 3}, kF64), zeros({0, 3, 2}, kF64)}, {0, 2, 2});
  // An empty inner dimension gives a zero product, and zero grads for the non-empty output.
  Tensor a = requiring_grad(zeros({2, 0}, kF64)), b = requiring_grad(zeros({0, 3}, kF64));
  Tensor c = matmul(a, b);
  require_close(c, Vec(6, 0.0));
  backward(c, ones({2, 3}, kF64));
  REQUIRE(grad_of(a).shape() == Shape{2, 0});
  REQUIRE(grad_of(b).shape() == Shape{0, 3});
}

TEST_CASE("bmm: forward, gradcheck, shape errors", "[dense]") {
  Generator gen(53);
  Tensor a = requiring_grad(normal({2, 2, 3}, gen)), b = requiring_grad(normal({2, 3, 4}, gen));
  require_close(bmm(a, b), ref_matmul(a, b).first);
  require_gradcheck([](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); }, {a, b});
  REQUIRE_THROWS_AS(bmm(normal({2, 2, 3}, gen), normal({3, 3, 4}, gen)), ShapeError);
  REQUIRE_THROWS_AS(bmm(normal({2, 3}, gen), normal({3, 4}, gen)), ShapeError);
  REQUIRE_THROWS_AS(bmm(normal({2, 2, 3}, gen), normal({2, 2, 4}, gen)), ShapeError);
}

namespace {
Vec ref_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  const Vec xv = x.to_vector(), wv = w.to_vector(), bv = bias.defined() ? bias.to_vector() : Vec(out, 0.0);
  Vec y;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bv[o];
      for (int64_t i = 0; i < in; ++i) acc += xv[r * in + i] * wv[o * in + i];
      y.push_back(acc);
    }
  return y;
}
}  // namespace

TEST_CASE("linear: any input rank, optional bias, forward and gradcheck", "[dense]") {
  Generator gen(54);
  for (const Shape& xs : {Shape{4}, Shape{3, 4}, Shape{2, 3, 4}}) {
    for (bool with_bias : {true, false}) {
      INFO("x " << shape_str(xs) << " bias " << with_bias);
      Tensor x = requiring_grad(normal(xs, gen));
      Tensor w = requiring_grad(normal({5, 4}, gen));
      Tensor bias = with_bias ? requiring_grad(normal({5}, gen)) : Tensor();
      Tensor y = linear(x, w, bias);
      Shape ys = xs;
      ys.back() = 5;
      REQUIRE(y.shape() == ys);
      require_close(y, ref_linear(x, w, bias));
      require_gradcheck([&](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, bias});
    }
  }
  INFO("a transposed input and weight");
  require_gradcheck([](const std::vector<Tensor>& in) { return linear(swap_last(in[0]), swap_last(in[1]), in[2]); },
                    {requiring_grad(normal({4, 3}, gen)), requiring_grad(normal({4, 5}, gen)),
                     requiring_grad(normal({5}, gen))});
  require_f32_matches_f64([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                          {normal({2, 3, 8}, gen), normal({5, 8}, gen), normal({5}, gen)});
}

TEST_CASE("linear: zero rows give zero weight grads and bias grads", "[dense]") {
  Tensor x = requiring_grad(zeros({0, 4}, kF64));
  Tensor w = requiring_grad(ones({3, 4}, kF64));
  Tensor bias = requiring_grad(ones({3}, kF64));
  Tensor y = linear(x, w, bias);
  REQUIRE(y.shape() == Shape{0, 3});
  backward(y, zeros({0, 3}, kF64));
  REQUIRE(grad_of(x).shape() == Shape{0, 4});
  require_close(grad_of(w), Vec(12, 0.0));
  require_close(grad_of(bias), Vec(3, 0.0));
}

// ==== norms =======================================================================================================

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
      const Vec want = ref_normalize(
          x.to_vector(), D, eps, [&](int64_t i) { return wv[i % D]; }, [&](int64_t i) { return bv[i % D]; });
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
      const Vec want = ref_normalize(
          x.to_vector(), (C / groups) * S, eps, [&](int64_t i) { return wv[channel(i)]; },
          [&](int64_t i) { return bv[channel(i)]; });
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

// ==== losses ======================================================================================================

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

// ==== errors ======================================================================================================

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
