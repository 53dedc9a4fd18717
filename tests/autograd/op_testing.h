// Shared by the autograd op tests: input makers, Tensor-level adapters onto the fp64 references of
// tests/support/reference.h, and the gradcheck / f32 / zero-size assertions.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"

namespace shardrt::test {

using Index = std::vector<int64_t>;
using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

inline const TensorOptions kF64{DType::f64, Device::cpu()};
inline const TensorOptions kI64{DType::i64, Device::cpu()};


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

// A standard-normal f64 leaf that requires grad.
inline Tensor leaf(const Shape& shape, Generator& gen) { return requiring_grad(normal(shape, gen)); }

// 0, 1, 2, ... as an f64 tensor of `shape`.
inline Tensor iota(const Shape& shape) {
  return arange(0, static_cast<double>(shape_numel(shape)), 1, kF64).reshape(shape);
}

// An i64 index tensor.
inline Tensor indices(const std::vector<double>& values, const Shape& shape) {
  return from_vector(values, shape, kI64);
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

inline void require_close(const Tensor& got, const Vec& want, double tol = 1e-12) {
  require_close(got.to_vector(), want, tol);
}

// The shape, and the values to 1e-14 relative (with the same absolute floor).
inline void require_values(const Tensor& t, const Shape& shape, const Vec& want) {
  REQUIRE(t.shape() == shape);
  require_close(t.to_vector(), want, 1e-14);
}

// The shape, and exactly these values: for ops that only move elements.
inline void require_exact(const Tensor& t, const Shape& shape, const Vec& want) {
  REQUIRE(t.shape() == shape);
  REQUIRE(t.to_vector() == want);
}

inline void require_gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(fn, inputs);
  INFO(r.report);
  REQUIRE(r.ok);
  REQUIRE(r.any_nonzero_grad);
}

inline void require_gradcheck(const OpFn& fn, const std::vector<Tensor>& inputs) {
  require_gradcheck(GradcheckFn([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in)}; }),
                    inputs);
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

// ---- Tensor-level references (over tests/support/reference.h) -------------------------------------------------

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
  for (int d = 0; d < nd; ++d)
    if (reduced[d]) kept[d] = 1;
  const Vec v = x.to_vector();
  std::vector<Vec> groups(shape_numel(kept));
  for (int64_t i = 0; i < x.numel(); ++i) groups[broadcast_flat(kept, unravel(i, x.shape()))].push_back(v[i]);
  Vec r;
  for (const Vec& g : groups) {
    switch (op) {
      case Ref::sum: r.push_back(col_sum(g)); break;
      case Ref::mean: r.push_back(col_sum(g) / static_cast<double>(g.size())); break;
      case Ref::max: r.push_back(col_max(g)); break;
      case Ref::min: r.push_back(col_min(g)); break;
      case Ref::logsumexp: r.push_back(col_logsumexp(g)); break;
    }
  }
  return r;
}

// x seen as (outer, n, inner) around dim.
inline View view_around(const Tensor& x, int dim) {
  const int d = dim < 0 ? dim + x.dim() : dim;
  View v{1, x.size(d), 1};
  for (int e = 0; e < d; ++e) v.outer *= x.size(e);
  for (int e = d + 1; e < x.dim(); ++e) v.inner *= x.size(e);
  return v;
}

// Softmax (or log-softmax) of x along dim.
inline Vec ref_softmax(const Tensor& x, int dim, bool log) {
  return ref_softmax(view_around(x, dim), x.to_vector(), log);
}

// NumPy matmul (batch dims broadcast, 1-d operands promoted); returns the values and the result shape.
inline std::pair<Vec, Shape> ref_matmul(const Tensor& a, const Tensor& b) {
  Shape as = a.shape(), bs = b.shape();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const Shape batch = broadcast_shapes(ab, bb, "ref");
  const Vec av = a.to_vector(), bv = b.to_vector();
  Vec out(shape_numel(batch) * M * N);
  for (int64_t i = 0; i < shape_numel(batch); ++i) {
    const Index idx = unravel(i, batch);
    const int64_t ao = broadcast_flat(ab, idx) * M * K, bo = broadcast_flat(bb, idx) * K * N;
    ref_gemm(false, false, M, N, K, 1.0, av.data() + ao, K, bv.data() + bo, N, 0.0, out.data() + i * M * N, N);
  }
  Shape shape = batch;
  if (a.dim() > 1) shape.push_back(M);
  if (b.dim() > 1) shape.push_back(N);
  return {out, shape};
}

}  // namespace shardrt::test
