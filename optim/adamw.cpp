#include "optim/adamw.h"

#include <cmath>

#include "runtime/errors.h"

namespace shardrt::optim {

void check_adamw_options(const AdamWOptions& o) {
  SHARDRT_CHECK(o.lr >= 0, ValueError, "AdamW: lr ", o.lr, " must be >= 0");
  SHARDRT_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, ValueError, "AdamW: betas (", o.beta1,
                ", ", o.beta2, ") must lie in [0, 1)");
  SHARDRT_CHECK(o.eps >= 0, ValueError, "AdamW: eps ", o.eps, " must be >= 0");
  SHARDRT_CHECK(o.weight_decay >= 0, ValueError, "AdamW: weight_decay ", o.weight_decay, " must be >= 0");
}

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWOptions& o, double lr, int64_t step) {
  const double t = static_cast<double>(step);
  const T decay = static_cast<T>(1 - lr * o.weight_decay);
  const T b1 = static_cast<T>(o.beta1), b2 = static_cast<T>(o.beta2);
  const T step_size = static_cast<T>(lr / (1 - std::pow(o.beta1, t)));
  const T sqrt_bc2 = static_cast<T>(std::sqrt(1 - std::pow(o.beta2, t)));
  const T eps = static_cast<T>(o.eps);
#pragma omp parallel for simd if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    p[i] *= decay;
    m[i] = b1 * m[i] + (T(1) - b1) * g[i];
    v[i] = b2 * v[i] + (T(1) - b2) * g[i] * g[i];
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / sqrt_bc2 + eps);
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWOptions&, double, int64_t);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, const AdamWOptions&, double,
                                   int64_t);

}  // namespace shardrt::optim
