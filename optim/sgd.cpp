#include "optim/sgd.h"

#include "runtime/errors.h"

namespace shardrt::optim {

void check_sgd_options(const SGDOptions& o) {
  SHARDRT_CHECK(o.lr >= 0, ValueError, "SGD: lr ", o.lr, " must be >= 0");
  SHARDRT_CHECK(o.momentum >= 0, ValueError, "SGD: momentum ", o.momentum, " must be >= 0");
  SHARDRT_CHECK(o.weight_decay >= 0, ValueError, "SGD: weight_decay ", o.weight_decay, " must be >= 0");
  SHARDRT_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), ValueError,
                "SGD: Nesterov momentum needs momentum > 0 and dampening 0 (given momentum ", o.momentum,
                ", dampening ", o.dampening, ")");
}

template <class T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, const SGDOptions& o, double lr, int64_t step) {
  const T wd = static_cast<T>(o.weight_decay), mu = static_cast<T>(o.momentum);
  const T keep = static_cast<T>(1 - o.dampening), rate = static_cast<T>(lr);
  const bool with_momentum = o.momentum != 0, first = step == 1;
#pragma omp parallel for simd if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i] + wd * p[i];
    if (with_momentum) {
      buf[i] = first ? d : mu * buf[i] + keep * d;
      d = o.nesterov ? d + mu * buf[i] : buf[i];
    }
    p[i] -= rate * d;
  }
}

template void sgd_update<float>(float*, const float*, float*, int64_t, const SGDOptions&, double, int64_t);
template void sgd_update<double>(double*, const double*, double*, int64_t, const SGDOptions&, double, int64_t);

}  // namespace shardrt::optim
