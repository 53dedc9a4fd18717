// kernels/cuda/softmax: what the op-level parity table cannot reach. In-place calls (y aliasing x, gx aliasing
// gy) and a slice that is entirely -inf. Skipped, with a warning, without a CUDA device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/softmax.h"
#include "runtime/cuda_context.h"
#include "tests/kernels/cuda_testing.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/support/cuda_skip.h"

namespace cu = shardrt::kernels::cuda;
using namespace shardrt::test;

TEMPLATE_TEST_CASE("cuda softmax and log_softmax in place, and an all -inf slice", "[cuda][kernels]", float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  // In place (y aliases x, gx aliases gy) gives the bits of the out-of-place run, whose values the parity table
  // checks, for row (inner == 1) and column (inner > 1) layouts.
  for (const View& s : {View{3, 7, 1}, View{2, 33, 5}, View{2, 4099, 3}}) {
    INFO("outer=" << s.outer << " n=" << s.n << " inner=" << s.inner);
    const Vec x = rounded<T>(random_vec(s.size(), -6, 6, 800));
    const Vec gy = rounded<T>(random_vec(s.size(), -1, 1, 801));
    DeviceBuffer<T> dx(cast<T>(x)), dy(s.size()), dgy(cast<T>(gy)), dgx(s.size());
    cu::softmax<T>(s.outer, s.n, s.inner, dx.get(), dy.get(), stream());
    cu::softmax<T>(s.outer, s.n, s.inner, dx.get(), dx.get(), stream());
    CHECK(dx.download() == dy.download());
    dx.upload(cast<T>(x));
    cu::log_softmax<T>(s.outer, s.n, s.inner, dx.get(), dy.get(), stream());
    cu::log_softmax_backward<T>(s.outer, s.n, s.inner, dy.get(), dgy.get(), dgx.get(), stream());
    cu::log_softmax_backward<T>(s.outer, s.n, s.inner, dy.get(), dgy.get(), dgy.get(), stream());
    CHECK(dgy.download() == dgx.download());
  }
  // A slice that is entirely -inf gives NaN (as in PyTorch); its neighbours are unaffected.
  for (int64_t inner : {1, 2}) {
    const View s{2, 3, inner};
    Vec x(s.size(), -kInf);
    for (int64_t k = 0; k < 3; ++k) {
      for (int64_t j = 0; j < inner; ++j) x[s.at(1, k, j)] = static_cast<double>(k);
    }
    DeviceBuffer<T> dx(cast<T>(x)), dy(s.size());
    cu::softmax<T>(2, 3, inner, dx.get(), dy.get(), stream());
    const Vec y = widen(dy.download());
    const double total = 1 + std::exp(1.0) + std::exp(2.0);
    for (int64_t k = 0; k < 3; ++k) {
      for (int64_t j = 0; j < inner; ++j) {
        CHECK(std::isnan(y[s.at(0, k, j)]));
        CHECK(y[s.at(1, k, j)] == Approx(std::exp(static_cast<double>(k)) / total).epsilon(1e-6));
      }
    }
  }
}
