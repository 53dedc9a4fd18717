#include "optim/sgd.h"

#include "kernels/cpu/simd.h"
#include "optim/update_simd.h"
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
  simd::SGDConstants<T> c;
  c.wd = static_cast<T>(o.weight_decay), c.mu = static_cast<T>(o.momentum);
  c.keep = static_cast<T>(1 - o.dampening), c.rate = static_cast<T>(lr);
  c.momentum = o.momentum != 0, c.first = step == 1, c.nesterov = o.nesterov;
  // Shape-only chunks, each in vector lanes (optim/update_simd.h): the same bits for any thread count.
  kernels::cpu::parallel_chunks(n, [&](int64_t lo, int64_t hi) {
    simd::sgd_chunk(p + lo, g + lo, c.momentum ? buf + lo : nullptr, hi - lo, c);
  });
}

template void sgd_update<float>(float*, const float*, float*, int64_t, const SGDOptions&, double, int64_t);
template void sgd_update<double>(double*, const double*, double*, int64_t, const SGDOptions&, double, int64_t);

}  // namespace shardrt::optim
