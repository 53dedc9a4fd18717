// The f32 Winograd F(2x2, 3x3) convolution (kernels/cpu/conv_winograd.h), the default path of 3x3 stride-1 2-d
// convolutions: forward, input grad, weight grad and bias grad against dense fp64 loops and against the im2col
// reference path, with paddings 0, 1 and 2 (the input grad runs with 2 - p), odd output extents (partial last
// tiles), rows narrower and wider than a vector of tiles, several tile-row chunks and samples, channel counts off
// any block; the accumulate / overwrite contract; the same bits at 1, 2 and 3 threads; and the shapes it leaves to
// the other paths.
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

struct WinogradCase {
  ConvCase c;
  double tol;  // against the fp64 loops, relative to 1 + |want|
};

// f32 within 1e-5 for sums of a few hundred terms. Where the weight grad sums thousands of positions (the 3-sample
// case: 4,440) the im2col path is itself 1.0e-5 off, and Winograd's weight grad rounds about twice as much as a
// direct sum (1.8e-5 measured: its transforms combine 16 partial sums with weights +-1/2 into each kernel tap); the
// 64-channel case sums 576 terms per output (im2col 1.4e-5 off).
const std::vector<WinogradCase> kCases = {
    {{2, 1, 3, 5, {7, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}}, 1e-5},      // odd output: partial last tiles
    {{2, 2, 4, 6, {6, 5}, {3, 3}, {1, 1}, {0, 0}, {1, 1}}, 1e-5},      // no padding (input grad padded by 2)
    {{2, 1, 5, 3, {5, 8}, {3, 3}, {1, 1}, {2, 2}, {1, 1}}, 1e-5},      // padding 2 (input grad unpadded)
    {{2, 3, 7, 9, {40, 37}, {3, 3}, {1, 1}, {1, 1}, {1, 1}}, 3e-5},    // rows of 19 tiles, many chunks, 3 samples
    {{2, 1, 6, 4, {3, 70}, {3, 3}, {1, 1}, {1, 0}, {1, 1}}, 1e-5},     // per-dim padding, one tile row
    {{2, 1, 64, 64, {40, 40}, {3, 3}, {1, 1}, {1, 1}, {1, 1}}, 3e-5},  // wide channels
};

using Result = ConvF32Result;
using Inputs = ConvF32Inputs;

}  // namespace

TEST_CASE("Winograd conv matches dense fp64 loops and the im2col path, forward and backward", "[kernels][cpu][conv]") {
  const ConvImplScope automatic(cpu::ConvImpl::automatic);
  for (const WinogradCase& wc : kCases) {
    const cpu::ConvGeometry g = wc.c.geometry();
    INFO("batch " << g.batch << " Cin " << g.c_in << " Cout " << g.c_out << " in " << g.in[0] << "x" << g.in[1]
                  << " pad " << g.pad[0] << "," << g.pad[1]);
    REQUIRE(cpu::conv_runs_winograd(g));
    require_conv_path_matches(g, 121, wc.tol, cpu::conv_runs_winograd);
  }
}

TEST_CASE("Winograd conv computes only the grads asked for, and leaves other shapes to the other paths",
          "[kernels][cpu][conv]") {
  const ConvImplScope automatic(cpu::ConvImpl::automatic);
  const cpu::ConvGeometry g = kCases[3].c.geometry();
  const Inputs in(g, 131);
  const Result all = run_conv_f32(g, in.x, in.w, in.bias, in.gy);
  const auto tx = cast<float>(in.x), tw = cast<float>(in.w), tgy = cast<float>(in.gy);
  std::vector<float> gx(in.x.size(), 9.0f), gw(in.w.size(), 0.0f), gbias(in.bias.size(), 0.0f);
  cpu::conv_backward<float>(g, tx.data(), tw.data(), tgy.data(), gx.data(), nullptr, nullptr);
  require_close(gx, all.gx, 0.0);
  cpu::conv_backward<float>(g, tx.data(), tw.data(), tgy.data(), nullptr, gw.data(), nullptr);
  require_close(gw, all.gw, 1e-6);
  cpu::conv_backward<float>(g, tx.data(), tw.data(), tgy.data(), nullptr, nullptr, gbias.data());
  require_close(gbias, all.gbias, 1e-6);
  // Not taken: stride 2, dilation 2, a 3x2 kernel, padding 3, 1-d and 3-d 3-tap kernels.
  for (const ConvCase& c : std::vector<ConvCase>{{2, 1, 2, 2, {9, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}},
                                                 {2, 1, 2, 2, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {2, 2}},
                                                 {2, 1, 2, 2, {9, 9}, {3, 2}, {1, 1}, {1, 1}, {1, 1}},
                                                 {2, 1, 2, 2, {9, 9}, {3, 3}, {1, 1}, {3, 3}, {1, 1}},
                                                 {1, 1, 2, 2, {9}, {3}, {1}, {1}, {1}},
                                                 {3, 1, 2, 2, {5, 5, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}})
    CHECK(!cpu::conv_runs_winograd(c.geometry()));
}

TEST_CASE("Winograd conv gives the same bits at 1, 2 and 3 threads", "[kernels][cpu][conv]") {
  const ConvImplScope automatic(cpu::ConvImpl::automatic);
  for (const size_t i : {size_t(3), size_t(5)}) {  // several chunks and weight-grad groups
    const cpu::ConvGeometry g = kCases[i].c.geometry();
    require_conv_same_bits_across_threads(g, 141);
  }
}
