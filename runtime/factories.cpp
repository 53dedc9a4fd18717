#include "runtime/factories.h"

#include <cmath>

#include "runtime/cuda/random_cuda.h"
#include "runtime/errors.h"
#include "runtime/random_fill.h"

namespace shardrt {

Tensor full(const Shape& shape, double value, TensorOptions opt) {
  Tensor t = Tensor::empty(shape, opt.dtype, opt.device);
  t.fill_(value);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions opt) { return full(shape, 0.0, opt); }
Tensor ones(const Shape& shape, TensorOptions opt) { return full(shape, 1.0, opt); }

Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions opt) {
  SHARDRT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), ShapeError, "from_vector: ", values.size(),
                " values for shape ", shape_str(shape));
  Tensor host = Tensor::from_blob(const_cast<double*>(values.data()), shape, DType::f64, Device::cpu());
  Tensor out = Tensor::empty(shape, opt.dtype, opt.device);
  out.copy_(host);
  return out;
}

Tensor arange(double start, double end, double step, TensorOptions opt) {
  SHARDRT_CHECK(step != 0.0, ValueError, "arange: step must be nonzero");
  double span = (end - start) / step;
  int64_t n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i) * step;
  return from_vector(v, {n}, opt);
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
  Generator& g = gen ? *gen : default_generator();
  uint64_t seed = g.seed(), offset = g.next_offset();
  // 16-bit results are drawn in f32 and rounded, so they match the f32 draw of the same (seed, offset).
  DType draw = opt.dtype == DType::f64 ? DType::f64 : DType::f32;
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
  return random_tensor(shape, opt, gen, philox::Distribution::uniform, low, high, "rand");
}

Tensor randn(const Shape& shape, TensorOptions opt, Generator* gen, double mean, double std) {
  return random_tensor(shape, opt, gen, philox::Distribution::normal, mean, std, "randn");
}

}  // namespace shardrt
