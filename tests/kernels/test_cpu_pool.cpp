// kernels/cpu/pool: avg and max pooling against direct loops and finite differences, and padding rules.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cpu/pool.h"
#include "kernels/pool_window.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/kernels/cpu_kernel_cases.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEST_CASE("avg and max pooling match direct loops and finite differences", "[kernels][cpu][pool]") {
  const std::vector<ConvCase> cases = {
      {1, 2, 3, 3, {9}, {3}, {2}, {1}, {1}},
      {2, 2, 2, 2, {7, 6}, {3, 2}, {2, 2}, {1, 1}, {1, 1}},
      {3, 1, 2, 2, {5, 6, 4}, {2, 3, 2}, {2, 1, 2}, {1, 1, 0}, {1, 1, 1}},
      {2, 1, 2, 2, {8, 7}, {3, 2}, {1, 2}, {1, 0}, {2, 3}},  // dilated (max pooling's dilation)
  };
  for (const ConvCase& c : cases) {
    INFO("nd " << c.nd << ", dilation " << c.dilation[0]);
    const cpu::ConvGeometry g = c.geometry();
    Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 80);
    const Vec gy = random_vec(g.batch * g.c_in * prod(g.out, 3), 81);
    Vec want_avg, want_max;
    std::vector<int64_t> want_argmax;
    ref_pool(g, x, want_avg, want_max, want_argmax);

    Vec avg(gy.size()), max(gy.size());
    std::vector<int64_t> argmax(gy.size());
    cpu::avg_pool_forward<double>(g, x.data(), avg.data());
    cpu::max_pool_forward<double>(g, x.data(), max.data(), argmax.data());
    require_close(avg, want_avg, 1e-14);
    require_close(max, want_max, 0.0);
    REQUIRE(argmax == want_argmax);

    Vec gx_avg(x.size(), 9.0), gx_max(x.size(), 9.0);
    cpu::avg_pool_backward<double>(g, gy.data(), gx_avg.data());
    cpu::max_pool_backward<double>(g, gy.data(), argmax.data(), gx_max.data());
    check_gradient(x, gx_avg, [&] {
      Vec y(gy.size());
      cpu::avg_pool_forward<double>(g, x.data(), y.data());
      return dot(y, gy);
    });
    check_gradient(x, gx_max, [&] {
      Vec y(gy.size());
      std::vector<int64_t> idx(gy.size());
      cpu::max_pool_forward<double>(g, x.data(), y.data(), idx.data());
      return dot(y, gy);
    });
  }
}

TEST_CASE("pooling padding: zeros in the average, -inf in the max", "[kernels][cpu][pool]") {
  const int64_t in[1] = {5}, k[1] = {3}, s[1] = {2}, p[1] = {1}, d[1] = {1};
  const cpu::ConvGeometry g = cpu::make_conv_geometry(1, 1, 1, 1, in, k, s, p, d);
  const Vec x = {1, 2, 3, 4, 5};
  Vec avg(3);
  cpu::avg_pool_forward<double>(g, x.data(), avg.data());
  require_close(avg, {1, 3, 3}, 1e-15);  // torch.nn.AvgPool1d(3, 2, 1)

  const int64_t in2[1] = {3}, k2[1] = {2}, s2[1] = {1};
  const cpu::ConvGeometry g2 = cpu::make_conv_geometry(1, 1, 1, 1, in2, k2, s2, p, d);
  const Vec negative = {-1, -2, -3};
  Vec max(4);
  std::vector<int64_t> argmax(4);
  cpu::max_pool_forward<double>(g2, negative.data(), max.data(), argmax.data());
  require_close(max, {-1, -1, -2, -3}, 0.0);
  REQUIRE(argmax == std::vector<int64_t>{0, 0, 1, 2});
}

// The reverse walk the CUDA backwards gather with (kernels/pool_window.h, shared with the device): for every input
// position, exactly the windows whose forward taps reach it, in increasing output order — the order in which the
// CPU's scatter over the forward taps adds into it, which is what makes the two backends' sums equal bit for bit.
TEST_CASE("pool window walk: the windows reaching an input are exactly the forward taps' inverse, in output order",
          "[kernels][cpu][pool]") {
  const std::vector<ConvCase> cases = {
      {1, 1, 1, 1, {9}, {3}, {2}, {1}, {1}},
      {2, 1, 1, 1, {7, 6}, {3, 2}, {2, 1}, {1, 1}, {1, 2}},
      {3, 1, 1, 1, {5, 6, 4}, {2, 3, 2}, {1, 2, 2}, {1, 1, 0}, {2, 1, 1}},
  };
  namespace pw = shardrt::kernels::pool_window;
  for (const ConvCase& c : cases) {
    INFO("nd " << c.nd);
    const cpu::ConvGeometry g = c.geometry();
    const int64_t in_vol = pw::volume(g.in), out_vol = pw::volume(g.out);
    // Forward taps, recorded as the scatter visits them: reached[i] lists the outputs in the order it adds them.
    std::vector<std::vector<int64_t>> reached(static_cast<size_t>(in_vol));
    int64_t p = 0, taps = 0;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2, ++p)
          pw::for_each_tap(g, o0, o1, o2, [&](int64_t src) { reached[static_cast<size_t>(src)].push_back(p), ++taps; });
    REQUIRE(p == out_vol);
    CHECK(taps > out_vol);  // overlapping windows: some input is reached more than once
    int64_t i = 0;
    for (int64_t i0 = 0; i0 < g.in[0]; ++i0)
      for (int64_t i1 = 0; i1 < g.in[1]; ++i1)
        for (int64_t i2 = 0; i2 < g.in[2]; ++i2, ++i) {
          std::vector<int64_t> got;
          pw::for_each_window_reaching(g, i0, i1, i2, [&](int64_t q) { got.push_back(q); });
          CHECK(got == reached[static_cast<size_t>(i)]);
        }
  }
}
