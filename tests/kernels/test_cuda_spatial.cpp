// kernels/cuda/{conv, group_norm, pool, upsample, shape_ops (pad), index} against their CPU twins where the
// backend parity table cannot reach: the bit-for-bit promises (pooling, upsampling, padding and the deterministic
// scatters equal the CPU exactly, in both dtypes, for every shape), heavily repeated scatter targets, the
// accumulate-into rule of the parameter grads (+=) and of index_add / scatter_add, garbage in overwritten
// outputs, and a convolution whose output is empty. Skipped, with a warning, without a CUDA device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/index.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/shape_ops.h"
#include "kernels/cpu/upsample.h"
#include "kernels/cuda/conv.h"
#include "kernels/cuda/index.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/pool.h"
#include "kernels/cuda/shape_ops.h"
#include "kernels/cuda/upsample.h"
#include "tests/kernels/cuda_testing.h"
#include "tests/support/compare.h"
#include "tests/support/cuda_skip.h"

namespace cpu = shardrt::kernels::cpu;
namespace cu = shardrt::kernels::cuda;
using namespace shardrt::test;

namespace {

// NaN where the kernel must overwrite: a skipped element shows up as a mismatch.
template <typename T>
std::vector<T> garbage(size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

template <typename T>
std::vector<T> random_t(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  return cast<T>(random_vec(static_cast<int64_t>(n), lo, hi, seed));
}

// Values on a quarter grid: max pooling meets ties.
template <typename T>
std::vector<T> quarter_grid(size_t n, uint64_t seed) {
  std::vector<T> v = random_t<T>(n, seed, -1, 1);
  for (T& e : v) e = static_cast<T>(std::round(static_cast<double>(e) * 4) / 4);
  return v;
}

template <typename T>
void require_equal(const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool same = got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]));
    if (!same && bad++ == 0) first = i;
  }
  INFO(bad << " of " << want.size() << " elements differ; first at " << first << ": got "
            << (bad ? double(got[first]) : 0.0) << ", want " << (bad ? double(want[first]) : 0.0));
  CHECK(bad == 0);
}

int64_t volume(const int64_t* v) { return v[0] * v[1] * v[2]; }

}  // namespace

TEMPLATE_TEST_CASE("cuda pooling equals the cpu kernels bit for bit, ties and padding included", "[cuda][kernels]",
                   float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  struct Case {
    int nd;
    int64_t in[3], kernel[3], stride[3], pad[3], dilation[3];
  };
  const Case cases[] = {{1, {9, 1, 1}, {3, 1, 1}, {2, 1, 1}, {1, 0, 0}, {1, 1, 1}},
                        {2, {7, 8, 1}, {3, 2, 1}, {1, 2, 1}, {1, 1, 0}, {1, 1, 1}},
                        {2, {9, 9, 1}, {2, 3, 1}, {3, 1, 1}, {0, 1, 0}, {2, 2, 1}},
                        {3, {4, 5, 6}, {2, 3, 2}, {2, 1, 1}, {1, 1, 0}, {1, 1, 1}}};
  uint64_t seed = 70;
  for (const Case& c : cases) {
    INFO("nd=" << c.nd << " in=" << c.in[0] << "x" << c.in[1] << "x" << c.in[2]);
    const cpu::ConvGeometry g =
        cpu::make_conv_geometry(c.nd, 2, 3, 3, c.in, c.kernel, c.stride, c.pad, c.dilation);
    const size_t n_in = static_cast<size_t>(6 * volume(g.in)), n_out = static_cast<size_t>(6 * volume(g.out));
    const std::vector<T> x = quarter_grid<T>(n_in, ++seed), gy = random_t<T>(n_out, ++seed);
    DeviceBuffer<T> dx(x), dgy(gy), dy(garbage<T>(n_out)), dgx(garbage<T>(n_in));
    DeviceBuffer<int64_t> dargmax(n_out);

    std::vector<T> y(n_out), gx(n_in);
    std::vector<int64_t> argmax(n_out);
    cpu::avg_pool_forward<T>(g, x.data(), y.data());
    cu::avg_pool_forward<T>(g, dx.get(), dy.get(), stream());
    require_equal(dy.download(), y);
    cpu::avg_pool_backward<T>(g, gy.data(), gx.data());
    cu::avg_pool_backward<T>(g, dgy.get(), dgx.get(), stream());
    require_equal(dgx.download(), gx);

    cpu::max_pool_forward<T>(g, x.data(), y.data(), argmax.data());
    cu::max_pool_forward<T>(g, dx.get(), dy.get(), dargmax.get(), stream());
    require_equal(dy.download(), y);
    CHECK(dargmax.download() == argmax);
    dgx.upload(garbage<T>(n_in));
    cpu::max_pool_backward<T>(g, gy.data(), argmax.data(), gx.data());
    cu::max_pool_backward<T>(g, dgy.get(), dargmax.get(), dgx.get(), stream());
    require_equal(dgx.download(), gx);
  }
}

TEMPLATE_TEST_CASE("cuda upsampling equals the cpu kernels bit for bit", "[cuda][kernels]", float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  struct Case {
    cpu::UpsampleMode mode;
    bool align_corners;
    int nd;
    std::vector<int64_t> in, out;
  };
  using M = cpu::UpsampleMode;
  const Case cases[] = {{M::nearest, false, 1, {5}, {13}},          {M::nearest, false, 2, {7, 4}, {3, 9}},
                        {M::nearest, false, 3, {2, 3, 4}, {5, 3, 7}}, {M::linear, false, 1, {5}, {13}},
                        {M::linear, true, 1, {6}, {4}},              {M::linear, true, 2, {4, 5}, {1, 11}},
                        {M::linear, false, 2, {9, 3}, {4, 10}},       {M::linear, false, 3, {3, 4, 2}, {7, 3, 5}},
                        {M::linear, true, 3, {1, 4, 3}, {3, 8, 3}}};
  uint64_t seed = 170;
  const int64_t planes = 3;
  for (const Case& c : cases) {
    INFO("mode=" << static_cast<int>(c.mode) << " align=" << c.align_corners << " nd=" << c.nd);
    int64_t in_vol = 1, out_vol = 1;
    for (int d = 0; d < c.nd; ++d) {
      in_vol *= c.in[d];
      out_vol *= c.out[d];
    }
    const std::vector<T> x = random_t<T>(planes * in_vol, ++seed), gy = random_t<T>(planes * out_vol, ++seed);
    std::vector<T> y(planes * out_vol), gx(planes * in_vol);
    cpu::upsample_forward<T>(c.mode, c.align_corners, c.nd, planes, c.in.data(), c.out.data(), x.data(), y.data());
    cpu::upsample_backward<T>(c.mode, c.align_corners, c.nd, planes, c.in.data(), c.out.data(), gy.data(),
                              gx.data());
    DeviceBuffer<T> dx(x), dgy(gy), dy(garbage<T>(y.size())), dgx(garbage<T>(gx.size()));
    cu::upsample_forward<T>(c.mode, c.align_corners, c.nd, planes, c.in.data(), c.out.data(), dx.get(), dy.get(),
                            stream());
    cu::upsample_backward<T>(c.mode, c.align_corners, c.nd, planes, c.in.data(), c.out.data(), dgy.get(),
                             dgx.get(), stream());
    require_equal(dy.download(), y);
    require_equal(dgx.download(), gx);
  }
}

TEMPLATE_TEST_CASE("cuda padding equals the cpu kernels bit for bit in every mode", "[cuda][kernels]", float,
                   double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  struct Case {
    cpu::PadMode mode;
    int nd;
    std::vector<int64_t> in, lo, hi;
  };
  using P = cpu::PadMode;
  // Pads beyond PyTorch's limits fold periodically (several outputs read one input): the folded sums are checked.
  const Case cases[] = {{P::constant, 2, {4, 5}, {2, -1}, {1, 3}}, {P::reflect, 1, {5}, {4, 9}, {0, 0}},
                        {P::reflect, 2, {3, 4}, {2, 3}, {5, 1}},  {P::replicate, 3, {2, 3, 4}, {3, 0, 1}, {1, 2, 5}},
                        {P::circular, 2, {3, 2}, {7, 2}, {4, 3}}, {P::reflect, 1, {1}, {2}, {3}}};
  uint64_t seed = 270;
  const int64_t outer = 3;
  for (const Case& c : cases) {
    INFO("mode=" << static_cast<int>(c.mode) << " nd=" << c.nd);
    int64_t in_vol = 1, out_vol = 1;
    for (int d = 0; d < c.nd; ++d) {
      in_vol *= c.in[d];
      out_vol *= c.in[d] + c.lo[d] + c.hi[d];
    }
    const std::vector<T> x = random_t<T>(outer * in_vol, ++seed), gy = random_t<T>(outer * out_vol, ++seed);
    std::vector<T> y(outer * out_vol), gx(outer * in_vol);
    cpu::pad<T>(c.mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), T(0.25), x.data(), y.data());
    cpu::pad_backward<T>(c.mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), gy.data(), gx.data());
    DeviceBuffer<T> dx(x), dgy(gy), dy(garbage<T>(y.size())), dgx(garbage<T>(gx.size()));
    cu::pad<T>(c.mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), T(0.25), dx.get(), dy.get(), stream());
    cu::pad_backward<T>(c.mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), dgy.get(), dgx.get(), stream());
    require_equal(dy.download(), y);
    require_equal(dgx.download(), gx);
  }
}

TEMPLATE_TEST_CASE("cuda index_add and scatter_add add into dst in the cpu's order, bit for bit, every run",
                   "[cuda][kernels]", float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  const int64_t outer = 3, inner = 5, n_dst = 7;
  // 3000 sources, most of them onto row 2: long runs, whose sum depends on its order in float.
  const int64_t n_idx = 3000;
  std::vector<int64_t> rows(n_idx);
  for (int64_t j = 0; j < n_idx; ++j) rows[j] = j % 5 == 0 ? (j * 7) % n_dst : 2;
  const std::vector<T> dst0 = random_t<T>(outer * n_dst * inner, 11);
  const std::vector<T> src = random_t<T>(outer * n_idx * inner, 12, -100, 100);

  std::vector<T> want = dst0;
  cpu::index_add<T>(outer, n_dst, inner, want.data(), n_idx, rows.data(), src.data());
  DeviceBuffer<int64_t> drows(rows);
  DeviceBuffer<T> dsrc(src), ddst(dst0);
  cu::index_add<T>(outer, n_dst, inner, ddst.get(), n_idx, drows.get(), dsrc.get(), stream());
  require_equal(ddst.download(), want);

  // scatter_add: an index per element, repeated targets within every (outer, inner) column.
  std::vector<int64_t> per_element(static_cast<size_t>(outer * n_idx * inner));
  for (size_t e = 0; e < per_element.size(); ++e) per_element[e] = e % 3 == 0 ? static_cast<int64_t>(e % n_dst) : 4;
  want = dst0;
  cpu::scatter_add<T>(outer, n_dst, inner, want.data(), n_idx, per_element.data(), src.data());
  DeviceBuffer<int64_t> dper(per_element);
  for (int run = 0; run < 2; ++run) {
    ddst.upload(dst0);
    cu::scatter_add<T>(outer, n_dst, inner, ddst.get(), n_idx, dper.get(), dsrc.get(), stream());
    require_equal(ddst.download(), want);
  }

  // The gathers, on the same index.
  std::vector<T> out(static_cast<size_t>(outer * n_idx * inner));
  DeviceBuffer<T> dout(garbage<T>(out.size()));
  cpu::index_select<T>(outer, n_dst, inner, dst0.data(), n_idx, rows.data(), out.data());
  ddst.upload(dst0);
  cu::index_select<T>(outer, n_dst, inner, ddst.get(), n_idx, drows.get(), dout.get(), stream());
  require_equal(dout.download(), out);
  cpu::gather<T>(outer, n_dst, inner, dst0.data(), n_idx, per_element.data(), out.data());
  cu::gather<T>(outer, n_dst, inner, ddst.get(), n_idx, dper.get(), dout.get(), stream());
  require_equal(dout.download(), out);
}

TEMPLATE_TEST_CASE("cuda group_norm matches the cpu kernel and accumulates its parameter grads", "[cuda][kernels]",
                   float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  const int64_t N = 3, C = 6, S = 37, G = 2;
  const size_t n = static_cast<size_t>(N * C * S);
  const std::vector<T> x = random_t<T>(n, 31, 1, 5), w = random_t<T>(C, 32, 0.5, 1.5), b = random_t<T>(C, 33),
                       gy = random_t<T>(n, 34);
  const std::vector<T> gw0 = random_t<T>(C, 35), gb0 = random_t<T>(C, 36);  // accumulated onto
  std::vector<T> y(n), mean(N * G), rstd(N * G), gx(n), gw = gw0, gb = gb0;
  cpu::groupnorm<T>(N, C, S, G, x.data(), w.data(), b.data(), T(1e-5), y.data(), mean.data(), rstd.data());
  cpu::groupnorm_backward<T>(N, C, S, G, x.data(), w.data(), mean.data(), rstd.data(), gy.data(), gx.data(),
                             gw.data(), gb.data());
  DeviceBuffer<T> dx(x), dw(w), db(b), dgy(gy), dy(garbage<T>(n)), dmean(N * G), drstd(N * G), dgx(garbage<T>(n)),
      dgw(gw0), dgb(gb0);
  cu::groupnorm<T>(N, C, S, G, dx.get(), dw.get(), db.get(), T(1e-5), dy.get(), dmean.get(), drstd.get(), stream());
  // The backward reads the cpu's saved statistics, so that it is compared alone.
  dmean.upload(mean);
  drstd.upload(rstd);
  cu::groupnorm_backward<T>(N, C, S, G, dx.get(), dw.get(), dmean.get(), drstd.get(), dgy.get(), dgx.get(),
                            dgw.get(), dgb.get(), stream());
  expect_close(dy.download(), widen(y), tol<T>(), tol<T>());
  expect_close(dgx.download(), widen(gx), tol<T>(), tol<T>());
  expect_close(dgw.download(), widen(gw), tol<T>(), tol<T>());
  expect_close(dgb.download(), widen(gb), tol<T>(), tol<T>());
}

TEMPLATE_TEST_CASE("cuda conv (cuDNN) matches the cpu kernel; gw and gbias accumulate; an empty output zeroes gx",
                   "[cuda][kernels]", float, double) {
  if (skip_without_cuda()) return;
  using T = TestType;
  struct Case {
    int nd;
    int64_t in[3], kernel[3], stride[3], pad[3], dilation[3];
  };
  // The last case's dilated kernel does not fit: an empty output.
  const Case cases[] = {{1, {13, 1, 1}, {3, 1, 1}, {2, 1, 1}, {1, 0, 0}, {2, 1, 1}},
                        {2, {9, 8, 1}, {3, 3, 1}, {1, 2, 1}, {1, 0, 0}, {1, 1, 1}},
                        {3, {5, 4, 6}, {2, 3, 2}, {1, 1, 2}, {1, 1, 0}, {1, 1, 1}},
                        {2, {3, 3, 1}, {3, 3, 1}, {1, 1, 1}, {0, 0, 0}, {2, 2, 1}}};
  uint64_t seed = 370;
  const int64_t B = 2, Cin = 3, Cout = 4;
  for (const Case& c : cases) {
    INFO("nd=" << c.nd);
    const cpu::ConvGeometry g = cpu::make_conv_geometry(c.nd, B, Cin, Cout, c.in, c.kernel, c.stride, c.pad,
                                                        c.dilation);
    const size_t nx = static_cast<size_t>(B * Cin * volume(g.in)), ny = static_cast<size_t>(B * Cout * volume(g.out)),
                 nw = static_cast<size_t>(Cout * Cin * volume(g.kernel));
    const std::vector<T> x = random_t<T>(nx, ++seed), w = random_t<T>(nw, ++seed), b = random_t<T>(Cout, ++seed),
                         gy = random_t<T>(ny, ++seed), gw0 = random_t<T>(nw, ++seed),
                         gb0 = random_t<T>(Cout, ++seed);
    std::vector<T> y(ny), gx(nx), gw = gw0, gb = gb0;
    cpu::conv_forward<T>(g, x.data(), w.data(), b.data(), y.data());
    cpu::conv_backward<T>(g, x.data(), w.data(), gy.data(), gx.data(), gw.data(), gb.data());
    DeviceBuffer<T> dx(x), dw(w), db(b), dgy(gy), dy(garbage<T>(ny)), dgx(garbage<T>(nx)), dgw(gw0), dgb(gb0);
    cu::conv_forward<T>(g, dx.get(), dw.get(), db.get(), dy.get(), stream());
    cu::conv_backward<T>(g, dx.get(), dw.get(), dgy.get(), dgx.get(), dgw.get(), dgb.get(), stream());
    expect_close(dy.download(), widen(y), tol<T>(), tol<T>());
    expect_close(dgx.download(), widen(gx), tol<T>(), tol<T>());
    expect_close(dgw.download(), widen(gw), tol<T>(), tol<T>());
    expect_close(dgb.download(), widen(gb), tol<T>(), tol<T>());
  }
}
