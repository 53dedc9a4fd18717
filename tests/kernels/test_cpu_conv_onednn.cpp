// The f32 convolution through oneDNN (kernels/cpu/conv_onednn.h): forward, input grad, weight grad and bias grad
// against dense loops in fp64 and against the im2col reference path, on shapes that exercise its pieces (channel
// groups with a shorter last group and channel counts off the 8-channel block, sample chunks, bands of output rows
// with halo and a shorter last band, strides, dilation, 1-d and 3-d, few input channels read in plain layout), the
// accumulate / overwrite contract, and the same bits at 1, 2 and 3 threads. Skipped (with a message) in a build
// without oneDNN, where the f32 path is the reference one that test_cpu_conv_paths covers.
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

struct OnednnCase {
  ConvCase c;
  double tol;  // against the fp64 loops, relative to 1 + |want|
  // false: oneDNN (AVX2) has no fast kernel for one of the three (the weight grad of a dilated kernel, the input
  // grad of a strided 1-d one or of stride 2 over a 2-wide kernel), which then runs im2col + GEMM
  bool whole = true;
};

// f32 stays within 1e-5 of the fp64 loops for reductions of a few hundred terms (Cin x taps, or positions per band
// for the weight grad); the 64- and 128-channel 3x3 cases sum 576 and 1152 terms per output, where the im2col path
// itself was measured up to 1.4e-5 and 2.2e-5 off (uniform inputs in [-1, 1]); the weight grad of the 70 x 65 case
// sums 4,550 positions, where the im2col path's is 1.0e-5 off.
const std::vector<OnednnCase> kCases = {
    {{2, 2, 44, 50, {13, 17}, {3, 3}, {1, 1}, {1, 1}, {1, 1}}, 1e-5},     // groups 44 (padded to 48) / 32 + 18
    {{2, 1, 64, 64, {40, 48}, {3, 3}, {1, 1}, {1, 1}, {1, 1}}, 2e-5},     // 4 bands of 11 rows, the last of 7
    {{2, 3, 16, 24, {20, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}}, 1e-5},      // strided: bands' input rows overlap
    {{2, 1, 8, 16, {21, 19}, {3, 3}, {1, 1}, {2, 2}, {2, 2}}, 1e-5, false},  // dilated, padding 2
    {{1, 3, 35, 33, {300}, {5}, {1}, {2}, {1}}, 1e-5},                    // 1-d, bands along its only dim
    {{1, 3, 20, 16, {301}, {5}, {2}, {2}, {1}}, 1e-5, false},             // 1-d strided: no fast input grad
    {{3, 2, 16, 20, {6, 7, 9}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}, 1e-5},  // 3-d, bands of depth slices
    {{2, 1, 3, 32, {70, 65}, {3, 3}, {1, 1}, {1, 1}, {1, 1}}, 2e-5},      // 3 input channels: plain-layout input
    {{2, 1, 128, 128, {17, 19}, {3, 3}, {1, 1}, {1, 1}, {1, 1}}, 3e-5},   // GALE's 128 -> 128 3x3
    {{2, 5, 9, 11, {6, 5}, {3, 2}, {1, 2}, {1, 0}, {1, 1}}, 1e-5, false},  // per-dim stride: no fast input grad
};

using Result = ConvF32Result;
using Inputs = ConvF32Inputs;

}  // namespace

TEST_CASE("oneDNN conv matches dense fp64 loops and the im2col path, forward and backward", "[kernels][cpu][conv]") {
  if (!cpu::conv_onednn_built()) {
    WARN("skipped: this build has no oneDNN (libdnnl); f32 convolutions run the im2col path");
    return;
  }
  const ConvImplScope onednn_only(cpu::ConvImpl::onednn);  // no Winograd for the 3x3 stride-1 cases
  for (const OnednnCase& oc : kCases) {
    const cpu::ConvGeometry g = oc.c.geometry();
    INFO("nd " << g.nd << " batch " << g.batch << " Cin " << g.c_in << " Cout " << g.c_out << " in " << g.in[0] << "x"
               << g.in[1] << "x" << g.in[2] << " kernel " << g.kernel[0] << " stride " << g.stride[0]);
    // The case must really run on oneDNN, or it would check the im2col path twice.
    if (oc.whole) REQUIRE(cpu::conv_runs_onednn(g));
    require_conv_path_matches(g, 81, oc.tol, cpu::conv_runs_onednn);
  }
}

TEST_CASE("oneDNN conv computes only the grads asked for", "[kernels][cpu][conv]") {
  if (!cpu::conv_onednn_built()) {
    WARN("skipped: this build has no oneDNN (libdnnl)");
    return;
  }
  const ConvImplScope onednn_only(cpu::ConvImpl::onednn);
  const cpu::ConvGeometry g = kCases[0].c.geometry();
  const Inputs in(g, 91);
  const Result all = run_conv_f32(g, in.x, in.w, in.bias, in.gy);
  const auto tx = cast<float>(in.x), tw = cast<float>(in.w), tgy = cast<float>(in.gy);
  std::vector<float> gx(in.x.size(), 9.0f), gw(in.w.size(), 0.0f), gbias(in.bias.size(), 0.0f);
  cpu::conv_backward<float>(g, tx.data(), tw.data(), tgy.data(), gx.data(), nullptr, nullptr);
  require_close(gx, all.gx, 0.0);
  cpu::conv_backward<float>(g, tx.data(), tw.data(), tgy.data(), nullptr, gw.data(), nullptr);
  require_close(gw, all.gw, 1e-6);  // all.gw had 0.25 added and taken away again
  cpu::conv_backward<float>(g, tx.data(), tw.data(), tgy.data(), nullptr, nullptr, gbias.data());
  require_close(gbias, all.gbias, 1e-6);
}

TEST_CASE("oneDNN conv gives the same bits at 1, 2 and 3 threads", "[kernels][cpu][conv]") {
  if (!cpu::conv_onednn_built()) {
    WARN("skipped: this build has no oneDNN (libdnnl)");
    return;
  }
  const ConvImplScope onednn_only(cpu::ConvImpl::onednn);
  // Several channel groups, sample chunks and bands, so that the pieces spread over the threads.
  for (const size_t i : {size_t(0), size_t(1), size_t(6), size_t(7)}) {
    const cpu::ConvGeometry g = kCases[i].c.geometry();
    require_conv_same_bits_across_threads(g, 101);
  }
}
