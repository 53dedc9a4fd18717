// Properties that hold across kernel families: the float instantiations agree with the double ones, and results
// do not depend on the OpenMP thread count (bit for bit).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/index.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/shape_ops.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/upsample.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/kernels/cpu_kernel_cases.h"
#include "tests/support/threads.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEST_CASE("parallel kernels give the same bits for any thread count", "[kernels][cpu]") {
  const int saved_threads = omp_get_max_threads();
  // fp64, whose sums show any change of summation order in the last bits (fp32 results rounded from fp64
  // accumulators would hide it). Large enough that every kernel below splits its work.
  const int64_t rows = 256, D = 512;
  const auto x = cast<double>(random_vec(rows * D, -2, 2, 1000));
  const auto w = cast<double>(random_vec(D, 0.5, 1.5, 1001));
  const auto gy = cast<double>(random_vec(rows * D, -1, 1, 1002));
  struct Result {
    std::vector<double> ln_gx, ln_gw, ln_gb, gn_gx, gn_gw, gn_gb, sums, softmax;
  };
  auto run_all = [&]() {
    Result r;
    std::vector<double> y(x.size()), mean(rows), rstd(rows);
    cpu::layernorm<double>(rows, D, x.data(), w.data(), nullptr, 1e-5, y.data(), mean.data(), rstd.data());
    r.ln_gx.resize(x.size());
    r.ln_gw.assign(D, 0.0);
    r.ln_gb.assign(D, 0.0);
    cpu::layernorm_backward<double>(rows, D, x.data(), w.data(), mean.data(), rstd.data(), gy.data(), r.ln_gx.data(),
                                   r.ln_gw.data(), r.ln_gb.data());
    // Groupnorm on the same buffer viewed as (N=4, C=64, S=512), 8 groups.
    const int64_t N = 4, C = 64, S = 512, G = 8;
    std::vector<double> gmean(N * G), grstd(N * G);
    cpu::groupnorm<double>(N, C, S, G, x.data(), w.data(), nullptr, 1e-5, y.data(), gmean.data(), grstd.data());
    r.gn_gx.resize(x.size());
    r.gn_gw.assign(C, 0.0);
    r.gn_gb.assign(C, 0.0);
    cpu::groupnorm_backward<double>(N, C, S, G, x.data(), w.data(), gmean.data(), grstd.data(), gy.data(),
                                   r.gn_gx.data(), r.gn_gw.data(), r.gn_gb.data());
    r.sums.resize(D + rows);
    cpu::reduce_sum<double>(1, rows, D, x.data(), r.sums.data());
    cpu::reduce_sum<double>(rows, D, 1, x.data(), r.sums.data() + D);
    r.softmax.resize(x.size());
    cpu::softmax<double>(1, rows, D, x.data(), r.softmax.data());
    return r;
  };
  omp_set_num_threads(1);
  const Result serial = run_all();
  omp_set_num_threads(3);
  const Result threaded = run_all();
  omp_set_num_threads(saved_threads);
  CHECK(serial.ln_gx == threaded.ln_gx);
  CHECK(serial.ln_gw == threaded.ln_gw);
  CHECK(serial.ln_gb == threaded.ln_gb);
  CHECK(serial.gn_gx == threaded.gn_gx);
  CHECK(serial.gn_gw == threaded.gn_gw);
  CHECK(serial.gn_gb == threaded.gn_gb);
  CHECK(serial.sums == threaded.sums);
  CHECK(serial.softmax == threaded.softmax);
}

TEST_CASE("float instantiations agree with the double kernels", "[kernels][cpu][float]") {
  const double tol = 2e-5;
  {
    const AttnData data({2, 70, 131, 6, 5}, 140);
    Vec out, lse;
    data.forward(out, lse);
    const Vec grad_out = random_vec(out.size(), 141), grad_lse = random_vec(lse.size(), 142);
    Vec gq(data.q.size()), gk(data.k.size()), gv(data.v.size());
    cpu::attention_backward<double>(2, 70, 131, 6, 5, data.scale, data.q.data(), data.k.data(), data.v.data(),
                                    out.data(), lse.data(), grad_out.data(), grad_lse.data(), gq.data(), gk.data(),
                                    gv.data());
    const std::vector<float> q = cast<float>(data.q), k = cast<float>(data.k), v = cast<float>(data.v);
    std::vector<float> fout(out.size()), flse(lse.size());
    cpu::attention_forward<float>(2, 70, 131, 6, 5, float(data.scale), q.data(), k.data(), v.data(), fout.data(),
                                  flse.data());
    require_close(fout, out, tol);
    require_close(flse, lse, tol);
    const std::vector<float> fgo = cast<float>(grad_out), fgl = cast<float>(grad_lse);
    std::vector<float> fgq(gq.size()), fgk(gk.size()), fgv(gv.size());
    cpu::attention_backward<float>(2, 70, 131, 6, 5, float(data.scale), q.data(), k.data(), v.data(), fout.data(),
                                   flse.data(), fgo.data(), fgl.data(), fgq.data(), fgk.data(), fgv.data());
    require_close(fgq, gq, 1e-4);
    require_close(fgk, gk, 1e-4);
    require_close(fgv, gv, 1e-4);
  }
  {
    const cpu::ConvGeometry g = conv_cases()[2].geometry();
    const Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 150);
    const Vec w = random_vec(g.c_out * g.c_in * prod(g.kernel, 3), 151);
    const Vec bias = random_vec(g.c_out, 152), gy = random_vec(g.batch * g.c_out * prod(g.out, 3), 153);
    Vec y(gy.size()), gx(x.size()), gw(w.size()), gb(bias.size());
    cpu::conv_forward<double>(g, x.data(), w.data(), bias.data(), y.data());
    cpu::conv_backward<double>(g, x.data(), w.data(), gy.data(), gx.data(), gw.data(), gb.data());
    const std::vector<float> fx = cast<float>(x), fw = cast<float>(w), fb = cast<float>(bias), fgy = cast<float>(gy);
    std::vector<float> fy(y.size()), fgx(gx.size()), fgw(gw.size()), fgb(gb.size());
    cpu::conv_forward<float>(g, fx.data(), fw.data(), fb.data(), fy.data());
    cpu::conv_backward<float>(g, fx.data(), fw.data(), fgy.data(), fgx.data(), fgw.data(), fgb.data());
    require_close(fy, y, tol);
    require_close(fgx, gx, tol);
    require_close(fgw, gw, tol);
    require_close(fgb, gb, tol);

    const cpu::ConvGeometry pg = patch_geometry(2, 2, 3, 2, {3, 4}, {2, 3});
    const Vec px = random_vec(pg.batch * pg.c_in * prod(pg.in, 3), 154), pw = random_vec(pg.c_in * pg.c_out * 6, 155);
    Vec py(pg.batch * pg.c_out * prod(pg.out, 3));
    cpu::conv_transpose_patch_forward<double>(pg, px.data(), pw.data(), nullptr, py.data());
    const std::vector<float> fpx = cast<float>(px), fpw = cast<float>(pw);
    std::vector<float> fpy(py.size()), fpgx(px.size());
    cpu::conv_transpose_patch_forward<float>(pg, fpx.data(), fpw.data(), nullptr, fpy.data());
    require_close(fpy, py, tol);
    Vec pgx(px.size());
    const std::vector<float> fpy_grad = cast<float>(py);
    cpu::conv_transpose_patch_backward<double>(pg, px.data(), pw.data(), py.data(), pgx.data(), nullptr, nullptr);
    cpu::conv_transpose_patch_backward<float>(pg, fpx.data(), fpw.data(), fpy_grad.data(), fpgx.data(), nullptr,
                                              nullptr);
    require_close(fpgx, pgx, tol);
  }
  {
    const cpu::ConvGeometry g = ConvCase{2, 2, 2, 2, {7, 6}, {3, 2}, {2, 2}, {1, 1}, {1, 1}}.geometry();
    const Vec x = random_vec(g.batch * g.c_in * prod(g.in, 3), 160);
    const Vec gy = random_vec(g.batch * g.c_in * prod(g.out, 3), 161);
    Vec avg(gy.size()), max(gy.size()), gx(x.size());
    std::vector<int64_t> argmax(gy.size()), fargmax(gy.size());
    cpu::avg_pool_forward<double>(g, x.data(), avg.data());
    cpu::max_pool_forward<double>(g, x.data(), max.data(), argmax.data());
    cpu::avg_pool_backward<double>(g, gy.data(), gx.data());
    const std::vector<float> fx = cast<float>(x), fgy = cast<float>(gy);
    std::vector<float> favg(avg.size()), fmax(max.size()), fgx(gx.size()), fgx_max(gx.size());
    cpu::avg_pool_forward<float>(g, fx.data(), favg.data());
    cpu::max_pool_forward<float>(g, fx.data(), fmax.data(), fargmax.data());
    cpu::avg_pool_backward<float>(g, fgy.data(), fgx.data());
    cpu::max_pool_backward<float>(g, fgy.data(), fargmax.data(), fgx_max.data());
    require_close(favg, avg, tol);
    require_close(fmax, max, tol);
    REQUIRE(fargmax == argmax);
    require_close(fgx, gx, tol);
    Vec gx_max(x.size());
    cpu::max_pool_backward<double>(g, gy.data(), argmax.data(), gx_max.data());
    require_close(fgx_max, gx_max, tol);
  }
  {
    const int64_t in[3] = {2, 3, 4}, out[3] = {5, 4, 7};
    const Vec x = random_vec(2 * 24, 170), gy = random_vec(2 * 140, 171);
    Vec y(gy.size()), gx(x.size());
    cpu::upsample_forward<double>(cpu::UpsampleMode::linear, false, 3, 2, in, out, x.data(), y.data());
    cpu::upsample_backward<double>(cpu::UpsampleMode::linear, false, 3, 2, in, out, gy.data(), gx.data());
    const std::vector<float> fx = cast<float>(x), fgy = cast<float>(gy);
    std::vector<float> fy(y.size()), fgx(gx.size());
    cpu::upsample_forward<float>(cpu::UpsampleMode::linear, false, 3, 2, in, out, fx.data(), fy.data());
    cpu::upsample_backward<float>(cpu::UpsampleMode::linear, false, 3, 2, in, out, fgy.data(), fgx.data());
    require_close(fy, y, tol);
    require_close(fgx, gx, tol);
  }
  {
    const std::vector<int64_t> idx = {2, 0, 2};
    const std::vector<float> src = {1, 2, 3, 4, 5, 6};  // (1, 3, 2)
    std::vector<float> sel(6), back(6, 0.0f), gat(6), sca(6, 0.0f);
    cpu::index_select<float>(1, 3, 2, src.data(), 3, idx.data(), sel.data());
    require_close(sel, {5, 6, 1, 2, 5, 6}, 0.0);
    cpu::index_add<float>(1, 3, 2, back.data(), 3, idx.data(), sel.data());
    require_close(back, {1, 2, 0, 0, 10, 12}, 0.0);
    const std::vector<int64_t> gidx = {2, 0, 1, 1, 0, 2};
    cpu::gather<float>(1, 3, 2, src.data(), 3, gidx.data(), gat.data());
    require_close(gat, {5, 2, 3, 4, 1, 6}, 0.0);
    cpu::scatter_add<float>(1, 3, 2, sca.data(), 3, gidx.data(), gat.data());
    require_close(sca, {1, 2, 3, 4, 5, 6}, 0.0);

    const float* parts[2] = {src.data(), src.data() + 2};
    const int64_t part_n[2] = {1, 2};
    std::vector<float> joined(6), a(2), b(4);
    cpu::cat<float>(1, 2, 2, parts, part_n, joined.data());
    require_close(joined, {1, 2, 3, 4, 5, 6}, 0.0);
    float* split_parts[2] = {a.data(), b.data()};
    cpu::split<float>(1, 2, 2, joined.data(), part_n, split_parts);
    require_close(b, {3, 4, 5, 6}, 0.0);

    const int64_t in[1] = {6}, lo[1] = {2}, hi[1] = {1};
    std::vector<float> padded(9), gpad(6);
    cpu::pad<float>(cpu::PadMode::reflect, 1, 1, in, lo, hi, 0.0f, src.data(), padded.data());
    require_close(padded, {3, 2, 1, 2, 3, 4, 5, 6, 5}, 0.0);
    cpu::pad_backward<float>(cpu::PadMode::reflect, 1, 1, in, lo, hi, padded.data(), gpad.data());
    require_close(gpad, {1, 4, 6, 4, 10, 6}, 0.0);
  }
}

TEST_CASE("results do not depend on the number of OpenMP threads", "[kernels][cpu][determinism]") {
  const AttnData data({4, 100, 150, 8, 8}, 180);
  Vec out, lse;
  data.forward(out, lse);
  const Vec grad_out = random_vec(out.size(), 181);
  auto attention_grads = [&] {
    Vec grads(data.q.size() + data.k.size() + data.v.size());
    cpu::attention_backward<double>(4, 100, 150, 8, 8, data.scale, data.q.data(), data.k.data(), data.v.data(),
                                    out.data(), lse.data(), grad_out.data(), nullptr, grads.data(),
                                    grads.data() + data.q.size(), grads.data() + data.q.size() + data.k.size());
    return grads;
  };
  // scatter_add with many repeated indices and outer = 1: the case a naive parallel loop would race on.
  const int64_t n_dst = 7, n_idx = 400, inner = 300;
  std::vector<int64_t> idx(n_idx * inner);
  std::mt19937_64 gen(9);
  for (int64_t& e : idx) e = int64_t(gen() % n_dst);
  const Vec src = random_vec(n_idx * inner, 182);
  auto scattered = [&] {
    Vec dst(n_dst * inner, 0.0);
    cpu::scatter_add<double>(1, n_dst, inner, dst.data(), n_idx, idx.data(), src.data());
    return dst;
  };
  Vec grads_serial, grads_parallel, scatter_serial, scatter_parallel;
  with_threads(1, [&] {
    grads_serial = attention_grads();
    scatter_serial = scattered();
  });
  with_threads(2, [&] {
    grads_parallel = attention_grads();
    scatter_parallel = scattered();
  });
  REQUIRE(grads_serial == grads_parallel);
  REQUIRE(scatter_serial == scatter_parallel);
}
