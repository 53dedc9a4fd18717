// kernels/cpu/pool: avg and max pooling against direct loops and finite differences, and padding rules.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cpu/pool.h"
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
