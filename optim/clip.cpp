#include "optim/clip.h"

#include <algorithm>
#include <type_traits>

#include "runtime/errors.h"

namespace shardrt::optim {

double sum_of_squares(const Tensor& x) {
  if (x.numel() == 0) return 0;
  SHARDRT_CHECK(x.device().is_cpu() && x.is_contiguous(), ValueError, "sum_of_squares: ", x.str(),
                " must be a contiguous CPU tensor");
  double s = 0;
  const int64_t n = x.numel();
  if (x.dtype() == DType::f64) {
    const double* p = x.data<double>();
#pragma omp parallel for reduction(+ : s) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) s += p[i] * p[i];
  } else if (x.dtype() == DType::f32) {
    const float* p = x.data<float>();
#pragma omp parallel for reduction(+ : s) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i]) * p[i];
  } else {
    return sum_of_squares(x.to(DType::f64));
  }
  return s;
}

double clip_coefficient(double total_norm, double max_norm) {
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

}  // namespace shardrt::optim

namespace shardrt::optim {
void scale_in_place(const Tensor& x, double s) {
  if (x.numel() == 0 || s == 1.0) return;
  SHARDRT_CHECK(x.device().is_cpu() && x.is_contiguous(), ValueError, "scale_in_place: ", x.str(),
                " must be a contiguous CPU tensor");
  const int64_t n = x.numel();
  auto run = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    const T f = static_cast<T>(s);
#pragma omp parallel for simd if (n > 65536)
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  };
  if (x.dtype() == DType::f64)
    run(x.data<double>());
  else if (x.dtype() == DType::f32)
    run(x.data<float>());
  else
    throw DTypeError("scale_in_place: " + x.str() + " must be f32 or f64");
}
}  // namespace shardrt::optim
