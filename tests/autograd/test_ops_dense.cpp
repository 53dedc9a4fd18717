// Dense local ops (elementwise, reductions, softmax, matmul/linear, norms, losses): forward values against plain
// loops, fp64 gradchecks (broadcasting, keepdim, negative dims, non-contiguous inputs, zero-size tensors), typed
// errors, and f32 forwards against f64.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

using namespace shardrt;

namespace {

using Vec = std::vector<double>;
using Index = std::vector<int64_t>;
using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

const TensorOptions kF64{DType::f64, Device::cpu()};

// ---- inputs -------------------------------------------------------------------------------------------------

Tensor normal(const Shape& shape, Generator& gen) { return randn(shape, kF64, &gen); }
Tensor uniform(const Shape& shape, Generator& gen, double lo, double hi) { return rand(shape, kF64, &gen, lo, hi); }

// Magnitudes in [0.2, 1.5] with alternating signs: away from the kinks of relu/abs and from division by ~0.
Tensor away_from_zero(const Shape& shape, Generator& gen) {
  Vec v = uniform(shape, gen, 0.2, 1.5).to_vector();
  for (size_t i = 0; i < v.size(); i += 2) v[i] = -v[i];
  return from_vector(v, shape, kF64);
}

Tensor requiring_grad(Tensor t) {
  set_requires_grad(t);
  return t;
}

// ---- a differentiable transposed view, to feed ops non-contiguous inputs under gradcheck ----------------------

struct SwapLastCtx {};

std::vector<Tensor> swap_last_backward(SwapLastCtx&, const std::vector<Tensor>& grad_outputs) {
  return {grad_outputs[0].transpose(-2, -1).contiguous()};
}

// x with its last two dims swapped, as a strided (non-contiguous) view.
Tensor swap_last(const Tensor& x) {
  return record("test_swap_last", {x}, x.transpose(-2, -1), SwapLastCtx{}, swap_last_backward);
}

// ---- checks ---------------------------------------------------------------------------------------------------

// |got - want| <= tol * (1 + |want|) elementwise; NaN matches NaN.
void require_close(const Vec& got, const Vec& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])));
  }
}

void require_close(const Tensor& got, const Vec& want, double tol = 1e-12) {
  require_close(got.to_vector(), want, tol);
}

void require_gradcheck(const OpFn& fn, const std::vector<Tensor>& inputs) {
  GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in)}; }, inputs);
  INFO(r.report);
  REQUIRE(r.ok);
  REQUIRE(r.any_nonzero_grad);
}

// The op run on f32 copies of the floating inputs agrees with the f64 run.
void require_f32_matches_f64(const OpFn& fn, const std::vector<Tensor>& inputs, double tol = 1e-5) {
  std::vector<Tensor> inputs32;
  for (const Tensor& t : inputs)
    inputs32.push_back(t.defined() && t.dtype() == DType::f64 ? t.to(DType::f32) : t);
  Tensor y32 = fn(inputs32);
  REQUIRE(y32.dtype() == DType::f32);
  require_close(y32, fn(inputs).to_vector(), tol);
}

// Runs fn on zero-size inputs that require grad and backpropagates ones: shapes must come out right.
void require_zero_size_ok(const OpFn& fn, std::vector<Tensor> inputs, const Shape& want_out) {
  for (Tensor& t : inputs)
    if (t.defined() && is_floating(t.dtype())) set_requires_grad(t);
  Tensor y = fn(inputs);
  REQUIRE(y.shape() == want_out);
  backward(y, ones(y.shape(), {y.dtype(), y.device()}));
  for (const Tensor& t : inputs) {
    if (!t.defined() || !requires_grad(t)) continue;
    Tensor g = grad_of(t);
    REQUIRE(g.defined());
    REQUIRE(g.shape() == t.shape());
  }
}

// ---- reference loops ------------------------------------------------------------------------------------------

Index unravel(int64_t flat, const Shape& shape) {
  Index idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

// Flat index into a tensor of `shape` read at position `idx` of a broadcast to a shape of rank >= its own.
int64_t broadcast_flat(const Shape& shape, const Index& idx) {
  const size_t lead = idx.size() - shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : idx[lead + d]);
  return flat;
}

Vec ref_binary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape out = broadcast_shapes(a.shape(), b.shape(), "ref");
  const Vec av = a.to_vector(), bv = b.to_vector();
  Vec r(shape_numel(out));
  for (int64_t i = 0; i < shape_numel(out); ++i) {
    const Index idx = unravel(i, out);
    r[i] = f(av[broadcast_flat(a.shape(), idx)], bv[broadcast_flat(b.shape(), idx)]);
  }
  return r;
}

Vec ref_map(const Tensor& x, const std::function<double(double)>& f) {
  Vec v = x.to_vector();
  for (double& e : v) e = f(e);
  return v;
}

enum class Ref { sum, mean, max, min, logsumexp };

// Reduction of x over `dims` (empty = all), in the row-major order of the kept dims.
Vec ref_reduce(const Tensor& x, std::vector<int> dims, Ref op) {
  const int nd = x.dim();
  std::vector<bool> reduced(nd, dims.empty());
  for (int d : dims) reduced[d < 0 ? d + nd : d] = true;
  Shape kept = x.shape();
  int64_t n = 1;
  for (int d = 0; d < nd; ++d)
    if (reduced[d]) n *= kept[d], kept[d] = 1;
  const Vec v = x.to_vector();
  std::vector<Vec> groups(shape_numel(kept));
  for (int64_t i = 0; i < x.numel(); ++i) groups[broadcast_flat(kept, unravel(i, x.shape()))].push_back(v[i]);
  Vec r;
  for (const Vec& g : groups) {
    double acc = 0, mx = -INFINITY, mn = INFINITY;
    for (double e : g) acc += e, mx = std::max(mx, e), mn = std::min(mn, e);
    double lse = 0;
    for (double e : g) lse += std::exp(e - mx);
    switch (op) {
      case Ref::sum: r.push_back(acc); break;
      case Ref::mean: r.push_back(acc / static_cast<double>(n)); break;
      case Ref::max: r.push_back(mx); break;
      case Ref::min: r.push_back(mn); break;
      case Ref::logsumexp: r.push_back(mx + std::log(lse)); break;
    }
  }
  return r;
}

// Softmax (or log-softmax) of x along dim by loops.
Vec ref_softmax(const Tensor& x, int dim, bool log) {
  const int d = dim < 0 ? dim + x.dim() : dim;
  const Vec v = x.to_vector();
  Vec r(v.size());
  for (int64_t i = 0; i < x.numel(); ++i) {
    Index idx = unravel(i, x.shape());
    double mx = -INFINITY;
    for (int64_t k = 0; k < x.size(d); ++k) {
      idx[d] = k;
      mx = std::max(mx, v[broadcast_flat(x.shape(), idx)]);
    }
    double total = 0;
    for (int64_t k = 0; k < x.size(d); ++k) {
      idx[d] = k;
      total += std::exp(v[broadcast_flat(x.shape(), idx)] - mx);
    }
    r[i] = log ? v[i] - mx - std::log(total) : std::exp(v[i] - mx) / total;
  }
  return r;
}

// NumPy matmul by loops; returns the values and the result shape.
std::pair<Vec, Shape> ref_matmul(const Tensor& a, const Tensor& b) {
  Shape as = a.shape(), bs = b.shape();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const Shape batch = broadcast_shapes(ab, bb, "ref");
  const Vec av = a.to_vector(), bv = b.to_vector();
  Vec out;
  for (int64_t i = 0; i < shape_numel(batch); ++i) {
    const Index idx = unravel(i, batch);
    const int64_t ao = broadcast_flat(ab, idx) * M * K, bo = broadcast_flat(bb, idx) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += av[ao + m * K + k] * bv[bo + k * N + n];
        out.push_back(acc);
      }
  }
  Shape shape = batch;
  if (a.dim() > 1) shape.push_back(M);
  if (b.dim() > 1) shape.push_back(N);
  return {out, shape};
}

// Normalises consecutive blocks of `block` elements of v; the affine parameter of element i is param(i).
Vec ref_normalize(const Vec& v, int64_t block, double eps, const std::function<double(int64_t)>& scale,
                  const std::function<double(int64_t)>& shift) {
  Vec r(v.size());
  for (size_t start = 0; start < v.size(); start += block) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < block; ++j) mu += v[start + j];
    mu /= static_cast<double>(block);
    for (int64_t j = 0; j < block; ++j) var += (v[start + j] - mu) * (v[start + j] - mu);
    var /= static_cast<double>(block);
    for (int64_t j = 0; j < block; ++j) {
      const int64_t i = static_cast<int64_t>(start) + j;
      r[i] = (v[i] - mu) / std::sqrt(var + eps) * scale(i) + shift(i);
    }
  }
  return r;
}

double gelu_erf_ref(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }
double gelu_tanh_ref(double v) {
  return 0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}
double sigmoid_ref(double v) { return 1 / (1 + std::exp(-v)); }

}  // namespace

// ==== binary ops ==================================================================================================

namespace {
struct BinaryCase {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
  bool positive_a;  // pow: a > 0
  bool nonzero_b;   // div: b away from 0
};

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", add, [](double a, double b) { return a + b; }, false, false},
      {"sub", sub, [](double a, double b) { return a - b; }, false, false},
      {"mul", mul, [](double a, double b) { return a * b; }, false, false},
      {"div", div, [](double a, double b) { return a / b; }, false, true},
      {"pow", pow, [](double a, double b) { return std::pow(a, b); }, true, false},
      {"maximum", maximum, [](double a, double b) { return std::max(a, b); }, false, false},
      {"minimum", minimum, [](double a, double b) { return std::min(a, b); }, false, false},
  };
  return cases;
}

Tensor binary_operand(const BinaryCase& c, bool first, const Shape& shape, Generator& gen) {
  if (first && c.positive_a) return uniform(shape, gen, 0.5, 2.0);
  if (!first && c.nonzero_b) return away_from_zero(shape, gen);
  return normal(shape, gen);
}
}  // namespace

TEST_CASE("binary ops: forward values with broadcasting", "[dense]") {
  Generator gen(11);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3, 4}, {3, 1}}, {{4}, {2, 3, 4}}, {{2, 1, 4}, {3, 1}}, {{2, 3}, {}}};
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [sa, sb] : shapes) {
      INFO(c.name << " " << shape_str(sa) << " with " << shape_str(sb));
      Tensor a = binary_operand(c, true, sa, gen), b = binary_operand(c, false, sb, gen);
      Tensor y = c.op(a, b);
      REQUIRE(y.shape() == broadcast_shapes(sa, sb, "test"));
      require_close(y, ref_binary(a, b, c.ref));
    }
    // A non-contiguous operand.
    Tensor a = binary_operand(c, true, {4, 3}, gen).transpose(0, 1), b = binary_operand(c, false, {3, 4}, gen);
    require_close(c.op(a, b), ref_binary(a, b, c.ref));
    const OpFn op = [&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); };
    require_f32_matches_f64(op, {binary_operand(c, true, {2, 3, 4}, gen), binary_operand(c, false, {3, 1}, gen)});
    require_zero_size_ok(op, {binary_operand(c, true, {0, 3}, gen), binary_operand(c, false, {3}, gen)}, {0, 3});
    require_zero_size_ok(op, {binary_operand(c, true, {2, 1}, gen), binary_operand(c, false, {0}, gen)}, {2, 0});
  }
}

TEST_CASE("binary ops: gradcheck with broadcasting and strided inputs", "[dense]") {
  Generator gen(12);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {}}, {{2, 3}, {3}}, {{3}, {2, 2, 3}}, {{2, 1, 3}, {2, 1}}};
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [sa, sb] : shapes) {
      INFO(c.name << " " << shape_str(sa) << " with " << shape_str(sb));
      Tensor a = requiring_grad(binary_operand(c, true, sa, gen));
      Tensor b = requiring_grad(binary_operand(c, false, sb, gen));
      require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); }, {a, b});
    }
    INFO(c.name << " with a transposed first operand");
    Tensor a = requiring_grad(binary_operand(c, true, {3, 2}, gen));
    Tensor b = requiring_grad(binary_operand(c, false, {2, 3}, gen));
    require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(swap_last(in[0]), in[1]); }, {a, b});
  }
}

TEST_CASE("binary ops: only operands that require grad get one", "[dense]") {
  Generator gen(13);
  Tensor a = requiring_grad(normal({2, 3}, gen));
  Tensor b = normal({3}, gen);
  backward(sum(mul(a, b)));
  require_close(grad_of(a), ref_binary(ones({2, 3}, kF64), b, [](double, double v) { return v; }));
  REQUIRE_FALSE(grad_of(b).defined());
}

TEST_CASE("maximum and minimum send tied grads to the first operand", "[dense]") {
  Tensor a = requiring_grad(from_vector({1.0, 2.0, 3.0}, {3}, kF64));
  Tensor b = requiring_grad(from_vector({1.0, 5.0, 0.0}, {3}, kF64));
  backward(maximum(a, b), from_vector({1.0, 1.0, 1.0}, {3}, kF64));
  require_close(grad_of(a), {1, 0, 1});
  require_close(grad_of(b), {0, 1, 0});
  zero_grad(a);
  zero_grad(b);
  backward(minimum(a, b), from_vector({1.0, 1.0, 1.0}, {3}, kF64));
  require_close(grad_of(a), {1, 1, 0});
  require_close(grad_of(b), {0, 0, 1});
}

TEST_CASE("add_scalar and mul_scalar", "[dense]") {
  Generator gen(14);
  Tensor x = requiring_grad(normal({2, 3}, gen));
  require_close(add_scalar(x, 1.5), ref_map(x, [](double v) { return v + 1.5; }));
  require_close(mul_scalar(x, -2.0), ref_map(x, [](double v) { return -2.0 * v; }));
  require_close(mul_scalar(x.transpose(0, 1), 3.0), ref_map(x.transpose(0, 1), [](double v) { return 3.0 * v; }));
  require_gradcheck([](const std::vector<Tensor>& in) { return add_scalar(in[0], 0.7); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return mul_scalar(swap_last(in[0]), -1.3); }, {x});
  require_f32_matches_f64([](const std::vector<Tensor>& in) { return mul_scalar(add_scalar(in[0], 0.1), 3.0); },
                          {normal({3, 4}, gen)});
  require_zero_size_ok([](const std::vector<Tensor>& in) { return mul_scalar(add_scalar(in[0], 1.0), 2.0); },
                       {zeros({2, 0}, kF64)}, {2, 0});
}

TEST_CASE("comparisons give u8 0/1 and carry no grad", "[dense]") {
  Tensor a = requiring_grad(from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, kF64));
  Tensor b = from_vector({2, 2, 5}, {3}, kF64);
  const std::vector<std::pair<Tensor (*)(const Tensor&, const Tensor&), Vec>> cases = {
      {eq, {0, 1, 0, 0, 0, 0}}, {ne, {1, 0, 1, 1, 1, 1}}, {lt, {1, 0, 1, 0, 0, 0}},
      {le, {1, 1, 1, 0, 0, 0}}, {gt, {0, 0, 0, 1, 1, 1}}, {ge, {0, 1, 0, 1, 1, 1}}};
  for (const auto& [op, want] : cases) {
    Tensor y = op(a, b);
    REQUIRE(y.dtype() == DType::u8);
    REQUIRE(y.shape() == Shape{2, 3});
    REQUIRE_FALSE(requires_grad(y));
    require_close(y, want);
  }
  require_close(gt(a, full({}, 3.0, kF64)), {0, 0, 0, 1, 1, 1});
  require_close(lt(a.transpose(0, 1), from_vector({2, 4}, {2}, kF64)), {1, 0, 0, 0, 0, 0});
  REQUIRE(ge(zeros({0, 3}, kF64), b).shape() == Shape{0, 3});
  const Vec nan_vs_one = {NAN, 1.0};
  require_close(eq(from_vector(nan_vs_one, {2}, kF64), from_vector(nan_vs_one, {2}, kF64)), {0, 1});
  require_close(ne(from_vector(nan_vs_one, {2}, kF64), from_vector(nan_vs_one, {2}, kF64)), {1, 0});
  require_close(gt(a.to(DType::f32), b.to(DType::f32)), gt(a, b).to_vector());
}

TEST_CASE("where: forward with broadcasting, u8 and bool conditions, gradcheck", "[dense]") {
  Generator gen(15);
  Tensor cond = gt(normal({3, 1}, gen), full({}, 0.0, kF64));
  Tensor a = requiring_grad(normal({2, 3, 4}, gen));
  Tensor b = requiring_grad(normal({4}, gen));
  Tensor y = where(cond, a, b);
  REQUIRE(y.shape() == Shape{2, 3, 4});
  const Vec cv = cond.to_vector(), av = a.to_vector(), bv = b.to_vector();
  Vec want(24);
  for (int64_t i = 0; i < 24; ++i) {
    const Index idx = unravel(i, {2, 3, 4});
    want[i] = cv[idx[1]] != 0 ? av[i] : bv[idx[2]];
  }
  require_close(y, want);
  require_gradcheck([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); }, {a, b});

  Tensor bool_cond = from_vector({1, 0, 1}, {3}, {DType::boolean, Device::cpu()});
  Tensor scalar = requiring_grad(full({}, 2.5, kF64));
  Tensor rows = requiring_grad(normal({2, 3}, gen));
  const Vec rv = rows.to_vector();
  require_close(where(bool_cond, scalar, rows), {2.5, rv[1], 2.5, 2.5, rv[4], 2.5});
  require_gradcheck([&](const std::vector<Tensor>& in) { return where(bool_cond, in[0], swap_last(in[1])); },
                    {scalar, requiring_grad(normal({3, 3}, gen))});

  const OpFn op = [&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); };
  require_f32_matches_f64(op, {normal({2, 3, 4}, gen), normal({4}, gen)});
  require_zero_size_ok(op, {zeros({0, 3, 4}, kF64), zeros({4}, kF64)}, {0, 3, 4});
}

// ==== unary ops ===================================================================================================

namespace {
enum class Domain { any, positive, away_from_zero };

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  double (*ref)(double);
  Domain domain;
};

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, Domain::any},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, Domain::any},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, Domain::positive},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, Domain::positive},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double v) { return 1 / std::sqrt(v); },
       Domain::positive},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, Domain::any},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double v) { return std::erf(v); }, Domain::any},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double v) { return std::abs(v); }, Domain::away_from_zero},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return std::max(v, 0.0); },
       Domain::away_from_zero},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_erf_ref, Domain::any},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::tanh); }, gelu_tanh_ref, Domain::any},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double v) { return v * sigmoid_ref(v); }, Domain::any},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, Domain::any},
      {"pow_scalar 2.5", [](const Tensor& x) { return pow_scalar(x, 2.5); }, [](double v) { return std::pow(v, 2.5); },
       Domain::positive},
      {"pow_scalar 3", [](const Tensor& x) { return pow_scalar(x, 3.0); }, [](double v) { return v * v * v; },
       Domain::any},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.6, 0.4); }, [](double v) { return std::clamp(v, -0.6, 0.4); },
       Domain::any},
  };
  return cases;
}

Tensor unary_input(Domain d, const Shape& shape, Generator& gen) {
  switch (d) {
    case Domain::positive: return uniform(shape, gen, 0.3, 2.0);
    case Domain::away_from_zero: return away_from_zero(shape, gen);
    case Domain::any: break;
  }
  // Normal values nudged away from clamp's bounds, the only kinks among the Domain::any ops.
  Vec v = normal(shape, gen).to_vector();
  for (double& e : v)
    for (double bound : {-0.6, 0.4})
      if (std::abs(e - bound) < 0.05) e += 0.1;
  return from_vector(v, shape, kF64);
}
}  // namespace

TEST_CASE("unary ops: forward values, gradcheck, strided and zero-size inputs", "[dense]") {
  Generator gen(21);
  for (const UnaryCase& c : unary_cases()) {
    INFO(c.name);
    Tensor x = requiring_grad(unary_input(c.domain, {2, 3}, gen));
    require_close(c.op(x), ref_map(x, c.ref));
    require_close(c.op(x.transpose(0, 1)), ref_map(x.transpose(0, 1), c.ref));
    require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {x});
    require_gradcheck([&](const std::vector<Tensor>& in) { return c.op(swap_last(in[0])); },
                      {requiring_grad(unary_input(c.domain, {2, 3}, gen))});
    require_zero_size_ok([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {zeros({0, 3}, kF64)}, {0, 3});
    require_f32_matches_f64([&](const std::vector<Tensor>& in) { return c.op(in[0]); },
                            {unary_input(c.domain, {3, 4}, gen)});
  }
}

TEST_CASE("unary ops: saved outputs give the same grads as the closed forms", "[dense]") {
  Generator gen(22);
  Tensor x = requiring_grad(normal({5}, gen));
  Tensor g = normal({5}, gen);
  backward(sigmoid(x), g);
  const Vec xv = x.to_vector(), gv = g.to_vector();
  Vec want(5);
  for (int i = 0; i < 5; ++i) want[i] = gv[i] * sigmoid_ref(xv[i]) * (1 - sigmoid_ref(xv[i]));
  require_close(grad_of(x), want);
}

TEST_CASE("to_dtype: casts any dtype, grads cast back, integer results carry no grad", "[dense]") {
  Generator gen(23);
  Tensor x = requiring_grad(normal({2, 3}, gen));
  Tensor y = to_dtype(x, DType::f32);
  REQUIRE(y.dtype() == DType::f32);
  REQUIRE(requires_grad(y));
  require_close(y, x.to_vector(), 1e-7);
  Tensor g = normal({2, 3}, gen).to(DType::f32);
  backward(y, g);
  REQUIRE(grad_of(x).dtype() == DType::f64);
  require_close(grad_of(x), g.to_vector());

  Tensor i = to_dtype(from_vector({1.7, -2.2, 3.0}, {3}, kF64), DType::i64);
  REQUIRE(i.dtype() == DType::i64);
  require_close(i, {1, -2, 3});
  Tensor xi = to_dtype(x, DType::i32);
  REQUIRE_FALSE(requires_grad(xi));
  require_close(to_dtype(i, DType::f64), {1, -2, 3});
  require_close(to_dtype(x, DType::bf16), x.to_vector(), 1e-2);

  require_gradcheck([](const std::vector<Tensor>& in) { return to_dtype(in[0], DType::f64); }, {x});
  require_zero_size_ok([](const std::vector<Tensor>& in) { return to_dtype(in[0], DType::f32); },
                       {zeros({0, 2}, kF64)}, {0, 2});
}

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
