// kernels/cpu/conv: output sizes, the im2col forward against direct loops in 1, 2 and 3 d (also over several
// im2col chunks), the transposed patch conv, and every backward against finite differences or the adjoint.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cpu/conv.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/kernels/cpu_kernel_cases.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEST_CASE("conv_output_size and make_conv_geometry follow PyTorch's formula", "[kernels][cpu][conv]") {
  REQUIRE(cpu::conv_output_size(11, 3, 2, 1, 2) == 5);
  REQUIRE(cpu::conv_output_size(7, 3, 1, 0, 1) == 5);
  REQUIRE(cpu::conv_output_size(8, 2, 2, 0, 1) == 4);
  REQUIRE(cpu::conv_output_size(2, 5, 1, 0, 1) == 0);
  const cpu::ConvGeometry g = conv_cases()[1].geometry();
  REQUIRE(g.out[0] == 4);
  REQUIRE(g.out[1] == 4);
  REQUIRE((g.in[2] == 1 && g.out[2] == 1 && g.kernel[2] == 1 && g.stride[2] == 1 && g.pad[2] == 0 &&
           g.dilation[2] == 1));
}

TEST_CASE("conv forward matches a direct convolution in 1, 2 and 3 d", "[kernels][cpu][conv]") {
  for (const ConvCase& c : conv_cases()) {
    INFO("nd " << c.nd);
    const cpu::ConvGeometry g = c.geometry();
    const Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 1);
    const Vec w = random_vec(g.c_out * g.c_in * prod(g.kernel, 3), 2);
    const Vec bias = random_vec(g.c_out, 3);
    Vec y(g.batch * g.c_out * prod(g.out, 3));
    cpu::conv_forward<double>(g, x.data(), w.data(), bias.data(), y.data());
    require_close(y, ref_conv(g, x, w, &bias), 1e-12);
    cpu::conv_forward<double>(g, x.data(), w.data(), nullptr, y.data());
    require_close(y, ref_conv(g, x, w, nullptr), 1e-12);
  }
}

TEST_CASE("conv backward matches finite differences in 1, 2 and 3 d", "[kernels][cpu][conv]") {
  for (const ConvCase& c : conv_cases()) {
    INFO("nd " << c.nd);
    const cpu::ConvGeometry g = c.geometry();
    Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 4);
    Vec w = random_vec(g.c_out * g.c_in * prod(g.kernel, 3), 5);
    Vec bias = random_vec(g.c_out, 6);
    const Vec gy = random_vec(g.batch * g.c_out * prod(g.out, 3), 7);
    // gx is overwritten (the 9s must go); the parameter grads accumulate, so they start at zero.
    Vec gx(x.size(), 9.0), gw(w.size(), 0.0), gbias(bias.size(), 0.0);
    cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), gx.data(), gw.data(), gbias.data());
    auto loss = [&] {
      Vec y(gy.size());
      cpu::conv_forward<double>(g, x.data(), w.data(), bias.data(), y.data());
      return dot(y, gy);
    };
    check_gradient(x, gx, loss);
    check_gradient(w, gw, loss);
    check_gradient(bias, gbias, loss);

    // Requesting only some grads gives the same values.
    Vec gx_only(x.size(), 9.0), gw_only(w.size(), 0.0);
    cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), gx_only.data(), nullptr, nullptr);
    cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), nullptr, gw_only.data(), nullptr);
    require_close(gx_only, gx, 0.0);
    require_close(gw_only, gw, 0.0);

    // The parameter grads accumulate: a second call onto them adds the same grads again.
    Vec gw_twice = gw, gbias_twice = gbias, twice_w(gw.size()), twice_b(gbias.size());
    cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), nullptr, gw_twice.data(), gbias_twice.data());
    for (size_t i = 0; i < gw.size(); ++i) twice_w[i] = 2 * gw[i];
    for (size_t i = 0; i < gbias.size(); ++i) twice_b[i] = 2 * gbias[i];
    require_close(gw_twice, twice_w, 1e-12);
    require_close(gbias_twice, twice_b, 1e-12);
  }
}

TEST_CASE("conv over several im2col chunks matches the direct loops, forward and adjoint", "[kernels][cpu][conv]") {
  // Cin·taps = 432 rows × 4096 output positions exceeds the im2col scratch budget, so columns go in chunks.
  const ConvCase c{3, 2, 16, 3, {16, 16, 16}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  const cpu::ConvGeometry g = c.geometry();
  const Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 8);
  const Vec w = random_vec(g.c_out * g.c_in * prod(g.kernel, 3), 9);
  const Vec gy = random_vec(g.batch * g.c_out * prod(g.out, 3), 10);
  Vec y(gy.size());
  cpu::conv_forward<double>(g, x.data(), w.data(), nullptr, y.data());
  require_close(y, ref_conv(g, x, w, nullptr), 1e-12);

  // The adjoint identity <conv(x, w), gy> = <x, gx> = <w, gw> checks both grads against the forward.
  Vec gx(x.size()), gw(w.size());
  cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), gx.data(), gw.data(), nullptr);
  const double reference = dot(y, gy);
  REQUIRE(dot(x, gx) == Approx(reference).epsilon(1e-12));
  REQUIRE(dot(w, gw) == Approx(reference).epsilon(1e-12));
  // And entry by entry for a few input voxels: gx[i] = <conv(e_i, w), gy>, e_i the i-th unit input.
  for (size_t i : {size_t(0), size_t(12345), x.size() - 1}) {
    Vec e(x.size(), 0.0);
    e[i] = 1.0;
    Vec ye(y.size());
    cpu::conv_forward<double>(g, e.data(), w.data(), nullptr, ye.data());
    REQUIRE(gx[i] == Approx(dot(ye, gy)).epsilon(1e-12));
  }
}

TEST_CASE("transposed patch conv matches direct loops and finite differences", "[kernels][cpu][conv]") {
  const std::vector<cpu::ConvGeometry> cases = {
      patch_geometry(1, 2, 3, 2, {5}, {4}),
      patch_geometry(2, 2, 2, 3, {3, 4}, {2, 3}),
      patch_geometry(3, 1, 3, 2, {2, 3, 2}, {2, 2, 3}),
      // Cout·taps = 256 rows × 4352 voxels spans two GEMM chunks.
      patch_geometry(3, 1, 2, 4, {17, 16, 16}, {4, 4, 4}),
  };
  for (size_t n = 0; n < cases.size(); ++n) {
    const cpu::ConvGeometry& g = cases[n];
    const bool large = n == cases.size() - 1;
    INFO("case " << n);
    Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 40 + n);
    Vec w = random_vec(g.c_in * g.c_out * prod(g.kernel, 3), 50 + n);
    Vec bias = random_vec(g.c_out, 60 + n);
    const Vec gy = random_vec(g.batch * g.c_out * prod(g.out, 3), 70 + n);
    Vec y(gy.size());
    cpu::conv_transpose_patch_forward<double>(g, x.data(), w.data(), bias.data(), y.data());
    require_close(y, ref_conv_transpose_patch(g, x, w, &bias), 1e-12);

    Vec gx(x.size(), 9.0), gw(w.size(), 0.0), gbias(bias.size(), 0.0);
    cpu::conv_transpose_patch_backward<double>(g, x.data(), w.data(), gy.data(), gx.data(), gw.data(),
                                               gbias.data());
    auto loss = [&] {
      Vec out(gy.size());
      cpu::conv_transpose_patch_forward<double>(g, x.data(), w.data(), bias.data(), out.data());
      return dot(out, gy);
    };
    check_gradient(x, gx, loss, large ? 6 : 150);
    check_gradient(w, gw, loss, large ? 6 : 150);
    check_gradient(bias, gbias, loss);
  }
}
