// kernels/cpu/conv's packing paths: row-wise im2col/col2im at stride 1 (copies and vector adds) and strided,
// the patchify path (kernel == stride: col2im stores, uncovered voxels get 0), 1-d convs (whose one real dim is
// moved last), odd spatial sizes, 1 and 3 input channels, fp64 and f32 (the f32 cases on the im2col path and on
// the default one, oneDNN where it is built), and the same bits at 1 and 2 threads.
// Every case is checked, forward and backward, against dense loops written from the definition.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cpu/conv.h"
#include "tests/kernels/cpu_kernel_cases.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/support/threads.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

namespace {

const std::vector<ConvCase> kPathCases = {
    {2, 2, 1, 4, {13, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}},      // 3×3 same-size, odd extents, one channel
    {2, 1, 3, 8, {64, 33}, {3, 3}, {1, 1}, {1, 1}, {1, 1}},     // large enough to run the packing in parallel
    {2, 1, 3, 2, {9, 11}, {3, 3}, {2, 2}, {1, 1}, {1, 1}},      // strided gather with padding
    {2, 2, 3, 5, {16, 12}, {4, 4}, {4, 4}, {0, 0}, {1, 1}},     // patchify tiling the input exactly
    {2, 1, 1, 3, {18, 13}, {4, 4}, {4, 4}, {0, 0}, {1, 1}},     // patchify leaving a border no patch reads
    {3, 1, 3, 4, {5, 4, 6}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}},  // 3-d patchify with a remainder
    {1, 2, 3, 2, {37}, {5}, {1}, {2}, {2}},                     // 1-d, dilated
    {1, 1, 3, 4, {24}, {8}, {8}, {0}, {1}},                     // 1-d patchify
    {2, 1, 2, 3, {10, 9}, {1, 3}, {1, 3}, {0, 0}, {1, 1}},      // patchify along one dim only
};

template <typename T>
std::vector<T> as(const Vec& v) {
  return std::vector<T>(v.begin(), v.end());
}

struct ConvResult {
  Vec y, gx, gw, gbias;
};

// Forward and backward in T on inputs rounded to T; gx starts at 9 (it must be overwritten everywhere).
template <typename T>
ConvResult run_conv(const cpu::ConvGeometry& g, const Vec& x, const Vec& w, const Vec& bias, const Vec& gy) {
  const auto tx = as<T>(x), tw = as<T>(w), tb = as<T>(bias), tgy = as<T>(gy);
  std::vector<T> y(gy.size()), gx(x.size(), T(9)), gw(w.size(), T(0)), gbias(bias.size(), T(0));
  cpu::conv_forward<T>(g, tx.data(), tw.data(), tb.data(), y.data());
  cpu::conv_backward<T>(g, tx.data(), tw.data(), tgy.data(), gx.data(), gw.data(), gbias.data());
  return {widen(y), widen(gx), widen(gw), widen(gbias)};
}

template <typename T>
void check_paths(double tolerance) {
  for (const ConvCase& c : kPathCases) {
    const cpu::ConvGeometry g = c.geometry();
    INFO("nd " << c.nd << " Cin " << g.c_in << " in " << g.in[0] << "x" << g.in[1] << "x" << g.in[2] << " kernel "
               << g.kernel[0] << "x" << g.kernel[1] << "x" << g.kernel[2] << " stride " << g.stride[0]);
    const Vec x = widen(as<T>(random_vec(g.batch * g.c_in * prod(g.in, 3), 61)));
    const Vec w = widen(as<T>(random_vec(g.c_out * g.c_in * prod(g.kernel, 3), 62)));
    const Vec bias = widen(as<T>(random_vec(g.c_out, 63)));
    const Vec gy = widen(as<T>(random_vec(g.batch * g.c_out * prod(g.out, 3), 64)));
    const ConvResult got = run_conv<T>(g, x, w, bias, gy);
    Vec gx, gw, gbias;
    dense_conv_backward(g, x, w, gy, gx, gw, gbias);
    require_close(got.y, ref_conv(g, x, w, &bias), tolerance);
    require_close(got.gx, gx, tolerance);
    require_close(got.gw, gw, tolerance);
    require_close(got.gbias, gbias, tolerance);
  }
}

}  // namespace

TEST_CASE("conv packing paths match dense loops, forward and backward, fp64", "[kernels][cpu][conv]") {
  check_paths<double>(1e-12);
}

TEST_CASE("conv packing paths match dense loops, forward and backward, f32", "[kernels][cpu][conv]") {
  // The im2col path itself (oneDNN takes the f32 shapes with overlapping windows by default), then the default.
  {
    const ConvImplScope reference(cpu::ConvImpl::reference);
    check_paths<float>(1e-5);
  }
  check_paths<float>(1e-5);
}

TEST_CASE("conv packing paths give the same bits at 1 and 2 threads", "[kernels][cpu][conv]") {
  for (const ConvCase& c : {kPathCases[1], kPathCases[3]}) {
    const cpu::ConvGeometry g = c.geometry();
    const Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 71);
    const Vec w = random_vec(g.c_out * g.c_in * prod(g.kernel, 3), 72);
    const Vec bias = random_vec(g.c_out, 73);
    const Vec gy = random_vec(g.batch * g.c_out * prod(g.out, 3), 74);
    ConvResult one, two;
    with_threads(1, [&] { one = run_conv<double>(g, x, w, bias, gy); });
    with_threads(2, [&] { two = run_conv<double>(g, x, w, bias, gy); });
    require_close(two.y, one.y, 0.0);
    require_close(two.gx, one.gx, 0.0);
    require_close(two.gw, one.gw, 0.0);
    require_close(two.gbias, one.gbias, 0.0);
  }
}
