// kernels/cuda/reduce: what the op-level parity table cannot reach. NaN and infinities in max, min and logsumexp,
// the first NaN's index, and a zero backward for a fully masked slice. Skipped, with a warning, without a CUDA
// device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/reduce.h"
#include "runtime/cuda_context.h"
#include "tests/kernels/cuda_testing.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/support/cuda_skip.h"

namespace cu = shardrt::kernels::cuda;
using namespace shardrt::test;

TEMPLATE_TEST_CASE("cuda reductions: NaN, infinities and the first NaN's index", "[cuda][kernels]", float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  // Four slices of length 5: all -inf; holding +inf; two NaNs (the first at k = 1); plain values with a tie.
  const std::vector<Vec> slices = {{-kInf, -kInf, -kInf, -kInf, -kInf},
                                   {1, kInf, 2, -kInf, 3},
                                   {1, kNaN, 5, kNaN, -1},
                                   {0.5, 2, -1, 2, 0}};
  const Vec want_max = {-kInf, kInf, kNaN, 2};
  const std::vector<int64_t> want_max_idx = {0, 1, 1, 1};
  const Vec want_min = {-kInf, -kInf, kNaN, -1};
  const std::vector<int64_t> want_min_idx = {0, 3, 1, 2};
  const Vec want_lse = {-kInf, kInf, kNaN, std::log(std::exp(0.5) + 2 * std::exp(2) + std::exp(-1) + 1)};
  for (int64_t inner : {1, 3}) {
    INFO("inner=" << inner);
    // Layout (outer = 4, n = 5, inner): every column j of slice o holds the same values.
    const View s{4, 5, inner};
    Vec x(s.size());
    for (int64_t o = 0; o < 4; ++o) {
      for (int64_t k = 0; k < 5; ++k) {
        for (int64_t j = 0; j < inner; ++j) x[s.at(o, k, j)] = slices[o][k];
      }
    }
    auto per_column = [&](const Vec& v) {
      Vec out;
      for (double e : v) out.insert(out.end(), inner, e);
      return out;
    };
    auto per_column_idx = [&](const std::vector<int64_t>& v) {
      std::vector<int64_t> out;
      for (int64_t e : v) out.insert(out.end(), inner, e);
      return out;
    };
    DeviceBuffer<T> dx(cast<T>(x)), dy(4 * inner), dgy(cast<T>(Vec(4 * inner, 1.0))), dgx(s.size());
    DeviceBuffer<int64_t> didx(4 * inner);
    cu::reduce_max<T>(4, 5, inner, dx.get(), dy.get(), didx.get(), stream());
    expect_close(widen(dy.download()), per_column(want_max), 0, 0);
    CHECK(didx.download() == per_column_idx(want_max_idx));
    cu::reduce_min<T>(4, 5, inner, dx.get(), dy.get(), didx.get(), stream());
    expect_close(widen(dy.download()), per_column(want_min), 0, 0);
    CHECK(didx.download() == per_column_idx(want_min_idx));
    cu::reduce_logsumexp<T>(4, 5, inner, dx.get(), dy.get(), stream());
    expect_close(widen(dy.download()), per_column(want_lse), tol<T>(), 0);
    // The backward of a fully masked (all -inf) slice is 0, not NaN.
    cu::reduce_logsumexp_backward<T>(4, 5, inner, dx.get(), dy.get(), dgy.get(), dgx.get(), stream());
    const Vec gx = widen(dgx.download());
    for (int64_t k = 0; k < 5; ++k) {
      for (int64_t j = 0; j < inner; ++j) CHECK(gx[s.at(0, k, j)] == 0.0);
    }
  }
}
