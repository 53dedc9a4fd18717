// Shared by the dense local-op tests: input makers, plain reference loops and the gradcheck / f32 / zero-size
// assertions.
#pragma once
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

inline Tensor normal(const Shape& shape, Generator& gen) { return randn(shape, kF64, &gen); }
inline Tensor uniform(const Shape& shape, Generator& gen, double lo, double hi) {
  return rand(shape, kF64, &gen, lo, hi);
}

// Magnitudes in [0.2, 1.5] with alternating signs: away from the kinks of relu/abs and from division by ~0.
inline Tensor away_from_zero(const Shape& shape, Generator& gen) {
  Vec v = uniform(shape, gen, 0.2, 1.5).to_vector();
  for (size_t i = 0; i < v.size(); i += 2) v[i] = -v[i];
  return from_vector(v, shape, kF64);
}

inline Tensor requiring_grad(Tensor t) {
  set_requires_grad(t);
  return t;
}

// ---- a differentiable transposed view, to feed ops non-contiguous inputs under gradcheck ----------------------

struct SwapLastCtx {};

inline std::vector<Tensor> swap_last_backward(SwapLastCtx&, const std::vector<Tensor>& grad_outputs) {
  return {grad_outputs[0].transpose(-2, -1).contiguous()};
}

// x with its last two dims swapped, as a strided (non-contiguous) view.
inline Tensor swap_last(const Tensor& x) {
  return record("test_swap_last", {x}, x.transpose(-2, -1), SwapLastCtx{}, swap_last_backward);
}

// ---- checks ---------------------------------------------------------------------------------------------------

// |got - want| <= tol * (1 + |want|) elementwise; NaN matches NaN.
inline void require_close(const Vec& got, const Vec& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])));
  }
}

inline void require_close(const Tensor& got, const Vec& want, double tol = 1e-12) {
  require_close(got.to_vector(), want, tol);
}

inline void require_gradcheck(const OpFn& fn, const std::vector<Tensor>& inputs) {
  GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in)}; }, inputs);
  INFO(r.report);
  REQUIRE(r.ok);
  REQUIRE(r.any_nonzero_grad);
}

// The op run on f32 copies of the floating inputs agrees with the f64 run.
inline void require_f32_matches_f64(const OpFn& fn, const std::vector<Tensor>& inputs, double tol = 1e-5) {
  std::vector<Tensor> inputs32;
  for (const Tensor& t : inputs)
    inputs32.push_back(t.defined() && t.dtype() == DType::f64 ? t.to(DType::f32) : t);
  Tensor y32 = fn(inputs32);
  REQUIRE(y32.dtype() == DType::f32);
  require_close(y32, fn(inputs).to_vector(), tol);
}

// Runs fn on zero-size inputs that require grad and backpropagates ones: shapes must come out right.
inline void require_zero_size_ok(const OpFn& fn, std::vector<Tensor> inputs, const Shape& want_out) {
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

inline Index unravel(int64_t flat, const Shape& shape) {
  Index idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

// Flat index into a tensor of `shape` read at position `idx` of a broadcast to a shape of rank >= its own.
inline int64_t broadcast_flat(const Shape& shape, const Index& idx) {
  const size_t lead = idx.size() - shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : idx[lead + d]);
  return flat;
}

inline Vec ref_binary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape out = broadcast_shapes(a.shape(), b.shape(), "ref");
  const Vec av = a.to_vector(), bv = b.to_vector();
  Vec r(shape_numel(out));
  for (int64_t i = 0; i < shape_numel(out); ++i) {
    const Index idx = unravel(i, out);
    r[i] = f(av[broadcast_flat(a.shape(), idx)], bv[broadcast_flat(b.shape(), idx)]);
  }
  return r;
}

inline Vec ref_map(const Tensor& x, const std::function<double(double)>& f) {
  Vec v = x.to_vector();
  for (double& e : v) e = f(e);
  return v;
}

enum class Ref { sum, mean, max, min, logsumexp };

// Reduction of x over `dims` (empty = all), in the row-major order of the kept dims.
inline Vec ref_reduce(const Tensor& x, std::vector<int> dims, Ref op) {
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
inline Vec ref_softmax(const Tensor& x, int dim, bool log) {
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
inline std::pair<Vec, Shape> ref_matmul(const Tensor& a, const Tensor& b) {
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
inline Vec ref_normalize(const Vec& v, int64_t block, double eps, const std::function<double(int64_t)>& scale,
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

inline double gelu_erf_ref(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }
inline double gelu_tanh_ref(double v) {
  return 0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}
inline double sigmoid_ref(double v) { return 1 / (1 + std::exp(-v)); }

}  // namespace
