// kernels/cuda/norm: layernorm against the fp64 two-pass reference where the op level cannot reach: data far
// from zero, the maximum number of param-grad chunks, accumulation into existing param grads, bitwise reproducible
// param grads, and skipped gx or param grads. Skipped, with a warning, without a CUDA device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/norm.h"
#include "runtime/cuda_context.h"
#include "tests/kernels/cuda_testing.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/support/cuda_skip.h"

namespace cu = shardrt::kernels::cuda;
using namespace shardrt::test;

TEMPLATE_TEST_CASE("cuda layernorm forward and backward against fp64 formulas", "[cuda][kernels]", float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  struct Case {
    int64_t rows, D;
    bool weight, bias;
    double offset;  // data far from zero tests the two-pass statistics
  };
  // (9000, 7) cuts the rows into the maximum number of param-grad chunks, the last ones empty.
  const Case cases[] = {{1, 1, true, true, 0},      {7, 33, true, true, 0},  {33, 1000, true, false, 1e4},
                        {5, 4099, false, true, 0},  {9000, 7, true, true, 0}, {3, 8, false, false, 0},
                        {0, 8, true, true, 0}};
  uint64_t seed = 900;
  for (const Case& c : cases) {
    INFO("rows=" << c.rows << " D=" << c.D << " weight=" << c.weight << " bias=" << c.bias);
    const int64_t size = c.rows * c.D;
    Vec x = random_vec(size, -2, 2, ++seed);
    for (double& v : x) v += c.offset + 0.5;
    x = rounded<T>(x);
    const Vec w = rounded<T>(random_vec(c.D, 0.5, 1.5, ++seed));
    const Vec b = rounded<T>(random_vec(c.D, -1, 1, ++seed));
    const Vec gy = rounded<T>(random_vec(size, -1, 1, ++seed));
    const double eps = 1e-5;

    const NormRef ref = ref_norm(x, c.rows, c.D, c.weight ? &w : nullptr, c.bias ? &b : nullptr, eps,
                                 [&](int64_t e) { return e % c.D; });
    const Vec &mean = ref.mean, &rstd = ref.rstd, &y = ref.y;
    DeviceBuffer<T> dx(cast<T>(x)), dw(cast<T>(w)), db(cast<T>(b)), dy(size), dmean(c.rows), drstd(c.rows);
    const T* wp = c.weight ? dw.get() : nullptr;
    cu::layernorm<T>(c.rows, c.D, dx.get(), wp, c.bias ? db.get() : nullptr, static_cast<T>(eps), dy.get(),
                     dmean.get(), drstd.get(), stream());
    // At an offset c the deviations x - mean carry the rounding of c (an ulp of 1e4 is 2e-12 in fp64), and the
    // mean of a row near zero is a cancellation: both need an absolute floor.
    expect_close(widen(dy.download()), y, tol<T>(), tol<T>() + 1e-14 * c.offset);
    expect_close(widen(dmean.download()), mean, tol<T>() * 0.1, tol<T>() * 0.1);
    expect_close(widen(drstd.download()), rstd, tol<T>(), 0);

    // Backward from the statistics rounded to T (what the forward saves). A large offset would cost the float
    // backward its precision (it works in T, as the CPU kernel does), so it is checked at offset 0 only.
    if (c.offset != 0.0) continue;
    const Vec mu = rounded<T>(mean), rs = rounded<T>(rstd);
    Vec want_gx(size), want_gw(c.D, 0.25), want_gb(c.D, -0.5);  // the param grads accumulate onto these
    for (int64_t r = 0; r < c.rows; ++r) {
      double mean_g = 0.0, mean_g_xhat = 0.0;
      for (int64_t j = 0; j < c.D; ++j) {
        const int64_t i = r * c.D + j;
        const double xhat = (x[i] - mu[r]) * rs[r];
        const double g = gy[i] * (c.weight ? w[j] : 1.0);
        mean_g += g / static_cast<double>(c.D);
        mean_g_xhat += g * xhat / static_cast<double>(c.D);
        want_gw[j] += gy[i] * xhat;
        want_gb[j] += gy[i];
      }
      for (int64_t j = 0; j < c.D; ++j) {
        const int64_t i = r * c.D + j;
        const double xhat = (x[i] - mu[r]) * rs[r];
        want_gx[i] = rs[r] * (gy[i] * (c.weight ? w[j] : 1.0) - mean_g - xhat * mean_g_xhat);
      }
    }
    DeviceBuffer<T> dmu(cast<T>(mu)), drs(cast<T>(rs)), dgy(cast<T>(gy)), dgx(size);
    DeviceBuffer<T> dgw(cast<T>(Vec(c.D, 0.25))), dgb(cast<T>(Vec(c.D, -0.5)));
    cu::layernorm_backward<T>(c.rows, c.D, dx.get(), wp, dmu.get(), drs.get(), dgy.get(), dgx.get(), dgw.get(),
                              dgb.get(), stream());
    const double grad_tol = std::is_same_v<T, double> ? 1e-10 : 1e-4;
    expect_close(widen(dgx.download()), want_gx, grad_tol, grad_tol * 0.1);
    const double sum_atol = grad_tol * 0.01 * static_cast<double>(c.rows + 1);
    const std::vector<T> gw_first = dgw.download();
    expect_close(widen(gw_first), want_gw, grad_tol, sum_atol);
    expect_close(widen(dgb.download()), want_gb, grad_tol, sum_atol);

    // Param grads are reproducible to the bit, and gx and either param grad may be skipped.
    dgw.upload(cast<T>(Vec(c.D, 0.25)));
    cu::layernorm_backward<T>(c.rows, c.D, dx.get(), wp, dmu.get(), drs.get(), dgy.get(), nullptr, dgw.get(), nullptr,
                              stream());
    CHECK(dgw.download() == gw_first);
    dgb.upload(cast<T>(Vec(c.D, -0.5)));
    cu::layernorm_backward<T>(c.rows, c.D, dx.get(), wp, dmu.get(), drs.get(), dgy.get(), nullptr, nullptr, dgb.get(),
                              stream());
    expect_close(widen(dgb.download()), want_gb, grad_tol, sum_atol);
  }
}
