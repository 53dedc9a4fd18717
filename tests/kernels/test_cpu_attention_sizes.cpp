// kernels/cpu/attention at the edges of its blocks and work split: sizes that are not multiples of the 64-query
// and 48-256-key blocks (64 x 128 for the fused small-head kernel), head dims 1, 16, 32, 33, 64 and 65, Nq != Nk, zero
// sizes, the f32 vector path against the fp64 reference, and the backward's key groups (few heads) against a dense
// fp64 backward, at 1 and 2 threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "tests/kernels/cpu_kernel_cases.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/support/threads.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

namespace {

const std::vector<AttnShape> kEdgeShapes = {
    {1, 300, 517, 16, 16},  // Nq and Nk straddle several blocks, the FLARE-like head dim
    {2, 64, 256, 1, 1},     // exactly one block each way, D = 1
    {1, 65, 257, 65, 65},   // one past each block and an odd, wide head dim
    {2, 129, 7, 16, 3},     // fewer keys than a vector has lanes
    {3, 1, 300, 4, 5},      // a single query row over two key blocks
    // The fused small-head kernel (head dims up to 32, kernels/cpu/attention_small.h): FLARE's two directions
    // (64 latent queries over many points, many points over 64 latents), GALE's head dim 32, and past it an odd
    // 33 x 31 and ViT-S's 64 (the BLAS-tiled kernel).
    {2, 64, 1100, 16, 16},
    {2, 600, 64, 16, 16},
    {1, 70, 300, 32, 32},
    {1, 40, 150, 33, 31},
    {1, 130, 300, 64, 64},
};

// Dense fp64 backward of L = <out, grad_out> + <lse, grad_lse>, straight from the definitions: P = softmax(S),
// dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP - rowsum(dP ∘ P)) + P ∘ grad_lse, dQ = scale dS K, dK = scale dSᵀ Q.
void dense_backward(const AttnShape& s, double scale, const Vec& q, const Vec& k, const Vec& v, const Vec& gout,
                    const Vec* glse, Vec& gq, Vec& gk, Vec& gv) {
  gq.assign(s.BH * s.Nq * s.D, 0.0);
  gk.assign(s.BH * s.Nk * s.D, 0.0);
  gv.assign(s.BH * s.Nk * s.Dv, 0.0);
  std::vector<double> p(s.Nk), dp(s.Nk);
  for (int64_t h = 0; h < s.BH; ++h)
    for (int64_t i = 0; i < s.Nq; ++i) {
      const double* qi = q.data() + (h * s.Nq + i) * s.D;
      const double* goi = gout.data() + (h * s.Nq + i) * s.Dv;
      double m = -std::numeric_limits<double>::infinity(), sum = 0, row = 0;
      for (int64_t j = 0; j < s.Nk; ++j) {
        double d = 0;
        for (int64_t c = 0; c < s.D; ++c) d += qi[c] * k[(h * s.Nk + j) * s.D + c];
        p[j] = scale * d;
        m = std::max(m, p[j]);
      }
      for (int64_t j = 0; j < s.Nk; ++j) sum += (p[j] = std::exp(p[j] - m));
      for (int64_t j = 0; j < s.Nk; ++j) {
        p[j] /= sum;
        double d = 0;
        for (int64_t c = 0; c < s.Dv; ++c) d += goi[c] * v[(h * s.Nk + j) * s.Dv + c];
        dp[j] = d;
        row += d * p[j];
      }
      const double gl = glse ? (*glse)[h * s.Nq + i] : 0.0;
      for (int64_t j = 0; j < s.Nk; ++j) {
        const double ds = p[j] * (dp[j] - row) + p[j] * gl;
        for (int64_t c = 0; c < s.Dv; ++c) gv[(h * s.Nk + j) * s.Dv + c] += p[j] * goi[c];
        for (int64_t c = 0; c < s.D; ++c) {
          gq[(h * s.Nq + i) * s.D + c] += scale * ds * k[(h * s.Nk + j) * s.D + c];
          gk[(h * s.Nk + j) * s.D + c] += scale * ds * qi[c];
        }
      }
    }
}

template <typename T>
std::vector<T> as(const Vec& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Forward then backward in T, the inputs rounded to T first; the fp64 references get the rounded inputs too.
template <typename T>
void check_against_dense(const AttnShape& s, bool with_lse, double tolerance) {
  const AttnData data(s, 41);
  const Vec q = widen(as<T>(data.q)), k = widen(as<T>(data.k)), v = widen(as<T>(data.v));
  const Vec gout = widen(as<T>(random_vec(s.BH * s.Nq * s.Dv, 42)));
  const Vec glse = widen(as<T>(random_vec(s.BH * s.Nq, 43)));
  const T scale = T(data.scale);

  std::vector<T> out(s.BH * s.Nq * s.Dv, T(7)), lse(s.BH * s.Nq, T(7));
  const auto tq = as<T>(q), tk = as<T>(k), tv = as<T>(v), tgo = as<T>(gout), tgl = as<T>(glse);
  cpu::attention_forward<T>(s.BH, s.Nq, s.Nk, s.D, s.Dv, scale, tq.data(), tk.data(), tv.data(), out.data(),
                            lse.data());
  Vec want_out, want_lse;
  ref_attention(s.BH, s.Nq, s.Nk, s.D, s.Dv, double(scale), q, k, v, want_out, want_lse);
  require_close(out, want_out, tolerance);
  require_close(lse, want_lse, tolerance);

  std::vector<T> gq(tq.size(), T(7)), gk(tk.size(), T(7)), gv(tv.size(), T(7));
  cpu::attention_backward<T>(s.BH, s.Nq, s.Nk, s.D, s.Dv, scale, tq.data(), tk.data(), tv.data(), out.data(),
                             lse.data(), tgo.data(), with_lse ? tgl.data() : nullptr, gq.data(), gk.data(),
                             gv.data());
  Vec want_gq, want_gk, want_gv;
  dense_backward(s, double(scale), q, k, v, gout, with_lse ? &glse : nullptr, want_gq, want_gk, want_gv);
  require_close(gq, want_gq, tolerance);
  require_close(gk, want_gk, tolerance);
  require_close(gv, want_gv, tolerance);
}

}  // namespace

TEST_CASE("attention forward and backward at block edges and odd head dims, fp64", "[kernels][cpu][attention]") {
  for (const AttnShape& s : kEdgeShapes)
    for (bool with_lse : {false, true}) {
      INFO("BH " << s.BH << " Nq " << s.Nq << " Nk " << s.Nk << " D " << s.D << " Dv " << s.Dv << " grad_lse "
                 << with_lse);
      check_against_dense<double>(s, with_lse, 1e-12);
    }
}

TEST_CASE("attention's f32 vector path matches the fp64 reference", "[kernels][cpu][attention]") {
  for (const AttnShape& s : kEdgeShapes) {
    INFO("BH " << s.BH << " Nq " << s.Nq << " Nk " << s.Nk << " D " << s.D << " Dv " << s.Dv);
    // Scores reach |s| ~ 3·sqrt(D) here; f32 rounding of the exp and of sums over hundreds of keys.
    check_against_dense<float>(s, true, 2e-5);
  }
}

TEST_CASE("attention with zero heads or zero queries writes nothing and zeroes dK, dV", "[kernels][cpu][attention]") {
  // BH = 0: nothing to read or write (null pointers are fine).
  cpu::attention_forward<float>(0, 5, 7, 3, 2, 0.5f, nullptr, nullptr, nullptr, nullptr, nullptr);
  cpu::attention_backward<float>(0, 5, 7, 3, 2, 0.5f, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                 nullptr, nullptr, nullptr);
  // Nq = 0 with keys: no query sends a grad, so dK and dV are all zero (overwritten, not left as they were).
  const AttnData data({2, 0, 300, 3, 2}, 9);
  const auto k = as<float>(data.k), v = as<float>(data.v);
  std::vector<float> gk(k.size(), 7.0f), gv(v.size(), 7.0f);
  cpu::attention_backward<float>(2, 0, 300, 3, 2, 0.5f, nullptr, k.data(), v.data(), nullptr, nullptr, nullptr,
                                 nullptr, nullptr, gk.data(), gv.data());
  for (float g : gk) REQUIRE(g == 0.0f);
  for (float g : gv) REQUIRE(g == 0.0f);
}

TEST_CASE("attention backward over key groups gives the same bits at 1 and 2 threads", "[kernels][cpu][attention]") {
  // One head and 1000 keys: the backward splits the keys into groups, each summing its own share of dQ.
  const AttnShape s{1, 150, 1000, 16, 16};
  const AttnData data(s, 51);
  const Vec gout = random_vec(s.BH * s.Nq * s.Dv, 52), glse = random_vec(s.BH * s.Nq, 53);
  auto run = [&](int threads) {
    std::vector<Vec> r(5, Vec());
    with_threads(threads, [&] {
      r[0].resize(s.BH * s.Nq * s.Dv);
      r[1].resize(s.BH * s.Nq);
      data.forward(r[0], r[1]);
      r[2].resize(data.q.size()), r[3].resize(data.k.size()), r[4].resize(data.v.size());
      cpu::attention_backward<double>(s.BH, s.Nq, s.Nk, s.D, s.Dv, data.scale, data.q.data(), data.k.data(),
                                      data.v.data(), r[0].data(), r[1].data(), gout.data(), glse.data(),
                                      r[2].data(), r[3].data(), r[4].data());
    });
    return r;
  };
  const auto one = run(1), two = run(2);
  for (int i = 0; i < 5; ++i) require_close(two[i], one[i], 0.0);
  Vec want_gq, want_gk, want_gv;
  dense_backward(s, data.scale, data.q, data.k, data.v, gout, &glse, want_gq, want_gk, want_gv);
  require_close(one[2], want_gq, 1e-12);
  require_close(one[3], want_gk, 1e-12);
  require_close(one[4], want_gv, 1e-12);
}

TEST_CASE("attention propagates a NaN key to every output of its head and nowhere else", "[kernels][cpu][attention]") {
  // A NaN must poison the softmax it enters (the vector exp alone would turn it into a zero weight).
  for (int64_t Nk : {int64_t(5), int64_t(300)}) {
    INFO("Nk " << Nk);
    AttnData data({2, 70, Nk, 16, 16}, 81);
    data.k[3 * 16 + 2] = std::numeric_limits<double>::quiet_NaN();  // head 0, key 3
    for (bool f32 : {false, true}) {
      Vec out(2 * 70 * 16), lse(2 * 70);
      if (f32) {
        const auto q = as<float>(data.q), k = as<float>(data.k), v = as<float>(data.v);
        std::vector<float> o(out.size()), l(lse.size());
        cpu::attention_forward<float>(2, 70, Nk, 16, 16, float(data.scale), q.data(), k.data(), v.data(), o.data(),
                                      l.data());
        out = widen(o), lse = widen(l);
      } else {
        data.forward(out, lse);
      }
      for (size_t i = 0; i < out.size(); ++i) REQUIRE(std::isnan(out[i]) == (i < out.size() / 2));
      for (size_t i = 0; i < lse.size(); ++i) REQUIRE(std::isnan(lse[i]) == (i < lse.size() / 2));
    }
  }
}
