#include "optim/adamw.h"

#include <cmath>

#include "kernels/cpu/simd.h"
#include "optim/update_simd.h"
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
  simd::AdamWConstants<T> c;
  c.decay = static_cast<T>(1 - lr * o.weight_decay);
  c.b1 = static_cast<T>(o.beta1), c.b2 = static_cast<T>(o.beta2);
  c.one_minus_b1 = T(1) - c.b1, c.one_minus_b2 = T(1) - c.b2;
  c.step_size = static_cast<T>(lr / (1 - std::pow(o.beta1, t)));
  c.sqrt_bc2 = static_cast<T>(std::sqrt(1 - std::pow(o.beta2, t)));
  c.eps = static_cast<T>(o.eps);
  // Shape-only chunks, each in vector lanes (optim/update_simd.h): the same bits for any thread count.
  kernels::cpu::parallel_chunks(n, [&](int64_t lo, int64_t hi) {
    simd::adamw_chunk(p + lo, g + lo, m + lo, v + lo, hi - lo, c);
  });
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, const AdamWOptions&, double, int64_t);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, const AdamWOptions&, double,
                                   int64_t);

}  // namespace shardrt::optim
