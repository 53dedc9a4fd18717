// kernels/cpu/upsample: nearest and linear resampling against PyTorch's values and source-index formulas, the
// backward against finite differences.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cpu/upsample.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/kernels/cpu_kernel_cases.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEST_CASE("upsample matches PyTorch's interpolate values", "[kernels][cpu][upsample]") {
  const Vec x = {1, 2, 3, 4};
  const int64_t in[1] = {4};
  auto run = [&](cpu::UpsampleMode mode, bool align, int64_t out_size) {
    const int64_t out[1] = {out_size};
    Vec y(out_size);
    cpu::upsample_forward<double>(mode, align, 1, 1, in, out, x.data(), y.data());
    return y;
  };
  // F.interpolate(torch.tensor([[[1., 2, 3, 4]]]), size=..., mode=..., align_corners=...)
  require_close(run(cpu::UpsampleMode::linear, false, 8), {1.0, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4.0}, 1e-15);
  require_close(run(cpu::UpsampleMode::linear, true, 7), {1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0}, 1e-15);
  require_close(run(cpu::UpsampleMode::linear, false, 3), {7.0 / 6.0, 2.5, 23.0 / 6.0}, 1e-15);
  require_close(run(cpu::UpsampleMode::nearest, false, 6), {1, 1, 2, 3, 3, 4}, 0.0);
  require_close(run(cpu::UpsampleMode::nearest, false, 3), {1, 2, 3}, 0.0);
}

TEST_CASE("upsample matches the reference formulas and finite differences", "[kernels][cpu][upsample]") {
  struct Case {
    int nd;
    std::vector<int64_t> in, out;
  };
  const std::vector<Case> cases = {{1, {5}, {12}}, {1, {7}, {3}}, {2, {3, 4}, {7, 5}}, {3, {2, 3, 4}, {5, 4, 7}},
                                   {2, {1, 3}, {4, 1}}};
  const int64_t planes = 3;
  for (const Case& c : cases)
    for (cpu::UpsampleMode mode : {cpu::UpsampleMode::nearest, cpu::UpsampleMode::linear})
      for (bool align : {false, true}) {
        if (mode == cpu::UpsampleMode::nearest && align) continue;
        INFO("nd " << c.nd << " in " << c.in[0] << " out " << c.out[0]
                   << (mode == cpu::UpsampleMode::nearest ? " nearest" : " linear") << " align " << align);
        Vec x = random_vec(planes * prod(c.in.data(), c.nd), 90);
        const Vec gy = random_vec(planes * prod(c.out.data(), c.nd), 91);
        Vec y(gy.size());
        cpu::upsample_forward<double>(mode, align, c.nd, planes, c.in.data(), c.out.data(), x.data(), y.data());
        require_close(y, ref_upsample(mode, align, c.nd, planes, c.in.data(), c.out.data(), x), 1e-14);

        Vec gx(x.size(), 9.0);
        cpu::upsample_backward<double>(mode, align, c.nd, planes, c.in.data(), c.out.data(), gy.data(), gx.data());
        check_gradient(x, gx, [&] {
          Vec out(gy.size());
          cpu::upsample_forward<double>(mode, align, c.nd, planes, c.in.data(), c.out.data(), x.data(),
                                        out.data());
          return dot(out, gy);
        });
      }
}
