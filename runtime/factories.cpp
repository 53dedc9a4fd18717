#include "runtime/factories.h"

#include <cmath>

#include "runtime/cuda/random_cuda.h"
#include "runtime/errors.h"
#include "runtime/random_fill.h"

namespace shardrt {

namespace {

// A contiguous tensor of `shape` set to `value`. The size is checked under the factory's name first, so a shape
// whose element or byte count overflows is reported as that factory's error rather than as one of empty's.
Tensor filled(const Shape& shape, double value, TensorOptions opt, const char* op) {
  shape_nbytes(shape, opt.dtype, op);
  Tensor t = Tensor::empty(shape, opt.dtype, opt.device);
  t.fill_(value);
  return t;
}

// The number of elements of arange(start, end, step): ValueError naming the arguments when one is not finite,
// the step is 0, or the count does not fit in int64 (a double past 2^63 has no int64 value; casting it is UB).
int64_t arange_length(double start, double end, double step) {
  SHARDRT_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), ValueError, "arange(", start, ", ",
                end, ", ", step, "): start, end and step must be finite");
  SHARDRT_CHECK(step != 0.0, ValueError, "arange(", start, ", ", end, ", ", step, "): step must be nonzero");
  // Finite arguments can still give an infinite span (end - start past the largest double); the bound below
  // refuses it along with every other count past int64.
  const double span = std::ceil((end - start) / step);
  SHARDRT_CHECK(span < 0x1p63, ValueError, "arange(", start, ", ", end, ", ", step, "): ", span,
                " elements do not fit in int64");
  return span > 0 ? static_cast<int64_t>(span) : 0;
}

}  // namespace

Tensor full(const Shape& shape, double value, TensorOptions opt) { return filled(shape, value, opt, "full"); }
Tensor zeros(const Shape& shape, TensorOptions opt) { return filled(shape, 0.0, opt, "zeros"); }
Tensor ones(const Shape& shape, TensorOptions opt) { return filled(shape, 1.0, opt, "ones"); }

Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions opt) {
  shape_nbytes(shape, opt.dtype, "from_vector");
  SHARDRT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape, "from_vector"), ShapeError,
                "from_vector: ", values.size(), " values for shape ", shape_str(shape));
  Tensor host = Tensor::from_blob(const_cast<double*>(values.data()), shape, DType::f64, Device::cpu());
  Tensor out = Tensor::empty(shape, opt.dtype, opt.device);
  out.copy_(host);
  return out;
}

Tensor arange(double start, double end, double step, TensorOptions opt) {
  const int64_t n = arange_length(start, end, step);
  // Values are computed in f64 on the host and converted once; the staging tensor goes through the allocator,
  // so a count too large for memory is its typed error, never std::bad_alloc. No dtype is wider than f64, so
  // this one byte check covers the output as well.
  shape_nbytes({n}, DType::f64, "arange");
  Tensor host = Tensor::empty({n}, DType::f64, Device::cpu());
  double* v = host.data<double>();
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i) * step;
  if (opt.dtype == DType::f64 && opt.device.is_cpu()) return host;
  Tensor out = Tensor::empty({n}, opt.dtype, opt.device);
  out.copy_(host);
  return out;
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {

Tensor random_tensor(const Shape& shape, TensorOptions opt, Generator* gen, philox::Distribution dist, double a,
                     double b, const char* op) {
  SHARDRT_CHECK(is_floating(opt.dtype), DTypeError, op, ": needs a floating dtype, got ", dtype_name(opt.dtype));
  // 16-bit results are drawn in f32 and rounded, so they match the f32 draw of the same (seed, offset).
  DType draw = opt.dtype == DType::f64 ? DType::f64 : DType::f32;
  // The draw is at least as wide as the result, so this covers both; checked before the generator advances.
  shape_nbytes(shape, draw, op);
  Generator& g = gen ? *gen : default_generator();
  uint64_t seed = g.seed(), offset = g.next_offset();
  Tensor t = Tensor::empty(shape, draw, opt.device);
  int64_t n = t.numel();
  if (opt.device.is_cpu()) {
    if (draw == DType::f64) {
      double* p = t.data<double>();
      for (int64_t i = 0; i < n; ++i) p[i] = philox::sample_f64(dist, seed, offset, static_cast<uint64_t>(i), a, b);
    } else {
      float* p = t.data<float>();
      for (int64_t i = 0; i < n; ++i)
        p[i] = philox::sample_f32(dist, seed, offset, static_cast<uint64_t>(i), static_cast<float>(a), static_cast<float>(b));
    }
  } else {
    philox_fill_cuda(opt.device.index, t.raw_data(), draw, n, dist, seed, offset, a, b);
  }
  return t.to(opt.dtype);
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions opt, Generator* gen, double low, double high) {
  // An infinite bound makes every sample inf or nan; reversed bounds are a caller's mistake, as in uniform_.
  SHARDRT_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, ValueError, "rand: bounds [", low, ", ",
                high, ") must be finite with low <= high, for shape ", shape_str(shape));
  return random_tensor(shape, opt, gen, philox::Distribution::uniform, low, high, "rand");
}

Tensor randn(const Shape& shape, TensorOptions opt, Generator* gen, double mean, double std) {
  SHARDRT_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0.0, ValueError, "randn: mean ", mean, " and std ",
                std, " must be finite with std >= 0, for shape ", shape_str(shape));
  return random_tensor(shape, opt, gen, philox::Distribution::normal, mean, std, "randn");
}

}  // namespace shardrt
