// Dense CPU kernels, part 2: reductions, softmax and norms against plain fp64 reference loops; backward kernels
// against central finite differences of the forward kernels in fp64; thread-count independence.
#include "cpu_dense_testing.h"

// =================================================================================================================
// Reductions

TEMPLATE_TEST_CASE("reductions match the reference", "[kernels][cpu]", float, double) {
  for (const View& v : reduce_views()) {
    INFO("outer=" << v.outer << " n=" << v.n << " inner=" << v.inner);
    const auto x = cast<TestType>(random_vec(v.size(), -2, 2, 200 + v.size()));
    const Vec xd(x.begin(), x.end());
    const size_t m = static_cast<size_t>(v.outer * v.inner);
    std::vector<TestType> y(m);
    std::vector<int64_t> idx(m, -1), arg(m, -1);

    cpu::reduce_sum<TestType>(v.outer, v.n, v.inner, x.data(), y.data());
    expect_close(y, ref_reduce(v, xd, col_sum), tol<TestType>(), tol<TestType>());
    cpu::reduce_mean<TestType>(v.outer, v.n, v.inner, x.data(), y.data());
    expect_close(y, ref_reduce(v, xd, [](const Vec& c) { return col_sum(c) / static_cast<double>(c.size()); }),
                 tol<TestType>(), tol<TestType>());
    cpu::reduce_logsumexp<TestType>(v.outer, v.n, v.inner, x.data(), y.data());
    expect_close(y, ref_reduce(v, xd, col_logsumexp), tol<TestType>());

    // Reference index: first position of the extreme (strict comparison keeps the first of ties).
    auto first_extreme = [](const Vec& c, bool max) {
      size_t best = 0;
      for (size_t k = 1; k < c.size(); ++k) {
        if (max ? c[k] > c[best] : c[k] < c[best]) best = k;
      }
      return best;
    };
    for (bool max : {true, false}) {
      INFO((max ? "max" : "min"));
      if (max) {
        cpu::reduce_max<TestType>(v.outer, v.n, v.inner, x.data(), y.data(), idx.data());
      } else {
        cpu::reduce_min<TestType>(v.outer, v.n, v.inner, x.data(), y.data(), idx.data());
      }
      const Vec want_idx = ref_reduce(v, xd, [&](const Vec& c) { return double(first_extreme(c, max)); });
      const Vec want_val = ref_reduce(v, xd, [&](const Vec& c) { return c[first_extreme(c, max)]; });
      expect_close(idx, want_idx, 0.0);
      expect_close(y, want_val, 0.0);
      if (max) {
        cpu::reduce_argmax<TestType>(v.outer, v.n, v.inner, x.data(), arg.data());
        expect_close(arg, want_idx, 0.0);
      }
    }
  }
}

TEST_CASE("reductions: ties, NaN, infinities and empty axes", "[kernels][cpu]") {
  SECTION("ties give the first index") {
    const Vec x = {1.0, 3.0, 3.0, 2.0, 1.0};
    double y = 0;
    int64_t idx = -1, arg = -1;
    cpu::reduce_max<double>(1, 5, 1, x.data(), &y, &idx);
    cpu::reduce_argmax<double>(1, 5, 1, x.data(), &arg);
    CHECK(y == 3.0);
    CHECK(idx == 1);
    CHECK(arg == 1);
    cpu::reduce_min<double>(1, 5, 1, x.data(), &y, &idx);
    CHECK(y == 1.0);
    CHECK(idx == 0);
  }
  SECTION("the first NaN wins max and min") {
    const Vec x = {1.0, kNaN, 5.0, kNaN};
    double y = 0;
    int64_t idx = -1, arg = -1;
    cpu::reduce_max<double>(1, 4, 1, x.data(), &y, &idx);
    CHECK(std::isnan(y));
    CHECK(idx == 1);
    cpu::reduce_min<double>(1, 4, 1, x.data(), &y, &idx);
    CHECK(std::isnan(y));
    CHECK(idx == 1);
    cpu::reduce_argmax<double>(1, 4, 1, x.data(), &arg);
    CHECK(arg == 1);
  }
  SECTION("logsumexp of infinite and large rows") {
    // Rows of (outer=5, n=2, inner=1).
    const Vec x = {-kInf, -kInf, kInf, 0.0, 1000.0, 1000.0, -kInf, 0.0, kNaN, 0.0};
    Vec y(5);
    cpu::reduce_logsumexp<double>(5, 2, 1, x.data(), y.data());
    expect_close(y, {-kInf, kInf, 1000.0 + std::log(2.0), 0.0, kNaN}, 1e-15);
  }
  SECTION("n == 0: sum 0, mean NaN, logsumexp -inf") {
    const int64_t outer = 3, inner = 2;
    const Vec none;
    Vec y(outer * inner, 5.0);
    cpu::reduce_sum<double>(outer, 0, inner, none.data(), y.data());
    expect_close(y, Vec(6, 0.0), 0.0);
    cpu::reduce_mean<double>(outer, 0, inner, none.data(), y.data());
    expect_close(y, Vec(6, kNaN), 0.0);
    cpu::reduce_mean<double>(outer, 0, 1, none.data(), y.data());
    expect_close(Vec(y.begin(), y.begin() + 3), Vec(3, kNaN), 0.0);
    cpu::reduce_logsumexp<double>(outer, 0, inner, none.data(), y.data());
    expect_close(y, Vec(6, -kInf), 0.0);
  }
  SECTION("zero outer or inner writes nothing") {
    Vec y = {4.0};
    const Vec x = {1.0};
    cpu::reduce_sum<float>(0, 3, 1, nullptr, nullptr);
    cpu::reduce_sum<double>(1, 1, 0, x.data(), y.data());
    CHECK(y[0] == 4.0);
  }
}

TEST_CASE("float sums of a million elements keep full precision", "[kernels][cpu]") {
  // Naive float accumulation of 1e6 values near 0.1 drifts by ~1e-4 relative; double accumulation stays within
  // float rounding of the result.
  const int64_t n = 1000000;
  std::vector<float> x(n);
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(0.05f, 0.15f);
  for (float& e : x) e = dist(gen);
  SECTION("one row") {
    double want = 0.0;
    for (float e : x) want += e;
    float y = 0, mean = 0;
    cpu::reduce_sum<float>(1, n, 1, x.data(), &y);
    cpu::reduce_mean<float>(1, n, 1, x.data(), &mean);
    CHECK(std::abs(y - want) <= 1e-7 * want);
    CHECK(std::abs(mean - want / n) <= 1e-7 * want / n);
  }
  SECTION("down a column (inner > 1)") {
    const int64_t inner = 4, rows = n / inner;
    Vec want(inner, 0.0);
    for (int64_t k = 0; k < rows; ++k) {
      for (int64_t j = 0; j < inner; ++j) want[j] += x[k * inner + j];
    }
    std::vector<float> y(inner);
    cpu::reduce_sum<float>(1, rows, inner, x.data(), y.data());
    expect_close(y, want, 1e-7);
  }
}

TEST_CASE("reduction backward kernels match finite differences", "[kernels][cpu]") {
  for (const View& v : {View{2, 7, 5}, View{3, 33, 1}, View{1, 1, 4}}) {
    INFO("outer=" << v.outer << " n=" << v.n << " inner=" << v.inner);
    const size_t m = static_cast<size_t>(v.outer * v.inner);
    const Vec x = random_vec(v.size(), -2, 2, 300 + v.size());
    const Vec gy = random_vec(static_cast<int64_t>(m), -1, 1, 301);
    Vec gx(x.size(), 99.0);
    auto forward = [&](auto kernel) {
      return [&, kernel](const Vec& in) {
        Vec out(m);
        kernel(v.outer, v.n, v.inner, in.data(), out.data());
        return out;
      };
    };

    cpu::reduce_sum_backward<double>(v.outer, v.n, v.inner, gy.data(), gx.data());
    expect_grad(gx, fd_grad(x, gy, forward(cpu::reduce_sum<double>)));

    cpu::reduce_mean_backward<double>(v.outer, v.n, v.inner, gy.data(), gx.data());
    expect_grad(gx, fd_grad(x, gy, forward(cpu::reduce_mean<double>)));

    Vec y(m);
    cpu::reduce_logsumexp<double>(v.outer, v.n, v.inner, x.data(), y.data());
    cpu::reduce_logsumexp_backward<double>(v.outer, v.n, v.inner, x.data(), y.data(), gy.data(), gx.data());
    expect_grad(gx, fd_grad(x, gy, forward(cpu::reduce_logsumexp<double>)));

    std::vector<int64_t> idx(m);
    for (bool max : {true, false}) {
      INFO((max ? "max" : "min"));
      auto extreme = [max](int64_t o, int64_t n, int64_t i, const double* in, double* out) {
        std::vector<int64_t> ignored(static_cast<size_t>(o * i));
        if (max) {
          cpu::reduce_max<double>(o, n, i, in, out, ignored.data());
        } else {
          cpu::reduce_min<double>(o, n, i, in, out, ignored.data());
        }
      };
      if (max) {
        cpu::reduce_max<double>(v.outer, v.n, v.inner, x.data(), y.data(), idx.data());
      } else {
        cpu::reduce_min<double>(v.outer, v.n, v.inner, x.data(), y.data(), idx.data());
      }
      std::fill(gx.begin(), gx.end(), 99.0);  // must be overwritten, zeros included
      cpu::reduce_index_backward<double>(v.outer, v.n, v.inner, idx.data(), gy.data(), gx.data());
      expect_grad(gx, fd_grad(x, gy, forward(extreme)));
    }
  }
  SECTION("logsumexp backward: -inf entries get 0, an all -inf row gets 0 not NaN") {
    const Vec x = {-kInf, 0.0, 1.0, -kInf, -kInf, -kInf};  // rows of (2, 3, 1)
    const Vec gy = {2.0, 3.0};
    Vec y(2), gx(6);
    cpu::reduce_logsumexp<double>(2, 3, 1, x.data(), y.data());
    cpu::reduce_logsumexp_backward<double>(2, 3, 1, x.data(), y.data(), gy.data(), gx.data());
    const double s = 1.0 + std::exp(1.0);
    expect_close(gx, {0.0, 2.0 / s, 2.0 * std::exp(1.0) / s, 0.0, 0.0, 0.0}, 1e-15);
  }
}

// =================================================================================================================
// Softmax

TEMPLATE_TEST_CASE("softmax and log_softmax match the reference", "[kernels][cpu]", float, double) {
  for (const View& v : reduce_views()) {
    INFO("outer=" << v.outer << " n=" << v.n << " inner=" << v.inner);
    // Shifted far from zero: without the max shift exp overflows.
    Vec xd = random_vec(v.size(), -3, 3, 400 + v.size());
    for (double& e : xd) e += 500.0;
    const auto x = cast<TestType>(xd);
    xd.assign(x.begin(), x.end());
    std::vector<TestType> y(x.size());
    cpu::softmax<TestType>(v.outer, v.n, v.inner, x.data(), y.data());
    expect_close(y, ref_softmax(v, xd, false), tol<TestType>(), tol<TestType>());
    cpu::log_softmax<TestType>(v.outer, v.n, v.inner, x.data(), y.data());
    expect_close(y, ref_softmax(v, xd, true), tol<TestType>(), tol<TestType>());
    y = x;  // in place
    cpu::softmax<TestType>(v.outer, v.n, v.inner, y.data(), y.data());
    expect_close(y, ref_softmax(v, xd, false), tol<TestType>(), tol<TestType>());
  }
}

TEST_CASE("softmax with -inf entries", "[kernels][cpu]") {
  // (outer=1, n=3, inner=2): column 0 has one masked entry, column 1 is fully masked.
  const Vec x = {-kInf, -kInf, 0.0, -kInf, std::log(3.0), -kInf};
  Vec y(6);
  cpu::softmax<double>(1, 3, 2, x.data(), y.data());
  expect_close(y, {0.0, kNaN, 0.25, kNaN, 0.75, kNaN}, 1e-15);
  cpu::log_softmax<double>(1, 3, 2, x.data(), y.data());
  expect_close(y, {-kInf, kNaN, std::log(0.25), kNaN, std::log(0.75), kNaN}, 1e-15);
}

TEST_CASE("softmax backward kernels match finite differences", "[kernels][cpu]") {
  for (const View& v : reduce_views()) {
    if (v.size() > 400) continue;  // finite differences cost O(size^2)
    INFO("outer=" << v.outer << " n=" << v.n << " inner=" << v.inner);
    const Vec x = random_vec(v.size(), -2, 2, 500 + v.size());
    const Vec gy = random_vec(v.size(), -1, 1, 501);
    for (bool log : {false, true}) {
      INFO((log ? "log_softmax" : "softmax"));
      auto forward = [&](const Vec& in) {
        Vec out(in.size());
        (log ? cpu::log_softmax<double> : cpu::softmax<double>)(v.outer, v.n, v.inner, in.data(), out.data());
        return out;
      };
      const Vec y = forward(x);
      Vec gx(x.size());
      (log ? cpu::log_softmax_backward<double> : cpu::softmax_backward<double>)(v.outer, v.n, v.inner, y.data(),
                                                                                 gy.data(), gx.data());
      expect_grad(gx, fd_grad(x, gy, forward));
    }
  }
}

// =================================================================================================================
// Norms

TEMPLATE_TEST_CASE("layernorm forward matches the reference", "[kernels][cpu]", float, double) {
  const double eps = 1e-5;
  for (int64_t rows : {1, 3}) {
    for (int64_t D : {1, 7, 33, 130}) {
      for (int affine = 0; affine < 3; ++affine) {  // 0: none, 1: weight only, 2: weight and bias
        INFO("rows=" << rows << " D=" << D << " affine=" << affine);
        const auto x = cast<TestType>(random_vec(rows * D, -2, 3, 600 + D));
        const auto w = cast<TestType>(random_vec(D, 0.5, 1.5, 601));
        const auto b = cast<TestType>(random_vec(D, -1, 1, 602));
        std::vector<TestType> y(x.size()), mean(rows), rstd(rows);
        cpu::layernorm<TestType>(rows, D, x.data(), affine ? w.data() : nullptr, affine == 2 ? b.data() : nullptr,
                                 TestType(eps), y.data(), mean.data(), rstd.data());
        const Vec wd(w.begin(), w.end()), bd(b.begin(), b.end());
        const NormRef ref = ref_norm(Vec(x.begin(), x.end()), rows, D, affine ? &wd : nullptr,
                                     affine == 2 ? &bd : nullptr, eps, [D](int64_t e) { return e % D; });
        expect_close(y, ref.y, tol<TestType>(), tol<TestType>());
        expect_close(mean, ref.mean, tol<TestType>(), tol<TestType>());
        expect_close(rstd, ref.rstd, tol<TestType>());
      }
    }
  }
}

TEST_CASE("float layernorm stays accurate far from zero", "[kernels][cpu]") {
  // x = 1e4 + O(1): E[x^2] - E[x]^2 in float cancels to noise, and a float mean is off by ~5e-4 alone.
  const int64_t rows = 2, D = 130;
  std::vector<float> x(rows * D);
  const Vec noise = random_vec(rows * D, -1, 1, 610);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(1e4 + noise[i]);
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  cpu::layernorm<float>(rows, D, x.data(), nullptr, nullptr, 1e-5f, y.data(), mean.data(), rstd.data());
  const NormRef ref =
      ref_norm(Vec(x.begin(), x.end()), rows, D, nullptr, nullptr, 1e-5, [D](int64_t e) { return e % D; });
  expect_close(rstd, ref.rstd, 1e-6);
  expect_close(y, ref.y, 1e-5, 1e-5);
}

TEST_CASE("layernorm backward matches finite differences", "[kernels][cpu]") {
  const double eps = 1e-5;
  for (int64_t D : {1, 7, 33}) {
    for (bool affine : {true, false}) {
      INFO("D=" << D << " affine=" << affine);
      const int64_t rows = 3;
      const Vec x = random_vec(rows * D, -2, 2, 700 + D);
      const Vec w = random_vec(D, 0.5, 1.5, 701);
      const Vec b = random_vec(D, -1, 1, 702);
      const Vec gy = random_vec(rows * D, -1, 1, 703);
      Vec y(x.size()), mean(rows), rstd(rows);
      const double* wp = affine ? w.data() : nullptr;
      const double* bp = affine ? b.data() : nullptr;
      cpu::layernorm<double>(rows, D, x.data(), wp, bp, eps, y.data(), mean.data(), rstd.data());
      // Parameter grads accumulate onto what is already there.
      Vec gx(x.size()), gw(D, 0.25), gb(D, -0.5);
      cpu::layernorm_backward<double>(rows, D, x.data(), wp, mean.data(), rstd.data(), gy.data(), gx.data(),
                                      affine ? gw.data() : nullptr, affine ? gb.data() : nullptr);
      auto run = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
        Vec out(xv.size()), m(rows), r(rows);
        cpu::layernorm<double>(rows, D, xv.data(), affine ? wv.data() : nullptr, affine ? bv.data() : nullptr, eps,
                               out.data(), m.data(), r.data());
        return out;
      };
      expect_grad(gx, fd_grad(x, gy, [&](const Vec& xv) { return run(xv, w, b); }));
      if (!affine) continue;
      Vec want_w = fd_grad(w, gy, [&](const Vec& wv) { return run(x, wv, b); });
      Vec want_b = fd_grad(b, gy, [&](const Vec& bv) { return run(x, w, bv); });
      for (int64_t j = 0; j < D; ++j) {
        want_w[j] += 0.25;
        want_b[j] -= 0.5;
      }
      expect_grad(gw, want_w);
      expect_grad(gb, want_b);

      // Without gx the parameter grads are the same.
      Vec gw2(D, 0.25), gb2(D, -0.5);
      cpu::layernorm_backward<double>(rows, D, x.data(), wp, mean.data(), rstd.data(), gy.data(), nullptr,
                                      gw2.data(), gb2.data());
      expect_close(gw2, gw, 0.0);
      expect_close(gb2, gb, 0.0);
    }
  }
}

TEMPLATE_TEST_CASE("groupnorm forward matches the reference", "[kernels][cpu]", float, double) {
  const double eps = 1e-5;
  const int64_t shapes[][4] = {{1, 6, 1, 1}, {2, 6, 5, 2}, {2, 6, 5, 3}, {3, 6, 7, 6}, {2, 4, 33, 2}};
  for (const auto& s : shapes) {
    const int64_t N = s[0], C = s[1], S = s[2], G = s[3];
    for (bool affine : {true, false}) {
      INFO("N=" << N << " C=" << C << " S=" << S << " G=" << G << " affine=" << affine);
      const auto x = cast<TestType>(random_vec(N * C * S, -2, 3, 800 + N * C * S));
      const auto w = cast<TestType>(random_vec(C, 0.5, 1.5, 801));
      const auto b = cast<TestType>(random_vec(C, -1, 1, 802));
      std::vector<TestType> y(x.size()), mean(N * G), rstd(N * G);
      cpu::groupnorm<TestType>(N, C, S, G, x.data(), affine ? w.data() : nullptr, affine ? b.data() : nullptr,
                               TestType(eps), y.data(), mean.data(), rstd.data());
      const Vec wd(w.begin(), w.end()), bd(b.begin(), b.end());
      const NormRef ref = ref_norm(Vec(x.begin(), x.end()), N * G, (C / G) * S, affine ? &wd : nullptr,
                                   affine ? &bd : nullptr, eps, [C, S](int64_t e) { return (e / S) % C; });
      expect_close(y, ref.y, tol<TestType>(), tol<TestType>());
      expect_close(mean, ref.mean, tol<TestType>(), tol<TestType>());
      expect_close(rstd, ref.rstd, tol<TestType>());
    }
  }
}

TEST_CASE("groupnorm backward matches finite differences", "[kernels][cpu]") {
  const double eps = 1e-5;
  const int64_t shapes[][4] = {{2, 6, 5, 3}, {1, 4, 7, 1}, {2, 6, 1, 6}};
  for (const auto& s : shapes) {
    const int64_t N = s[0], C = s[1], S = s[2], G = s[3];
    for (bool affine : {true, false}) {
      INFO("N=" << N << " C=" << C << " S=" << S << " G=" << G << " affine=" << affine);
      const Vec x = random_vec(N * C * S, -2, 2, 900 + N * C * S);
      const Vec w = random_vec(C, 0.5, 1.5, 901);
      const Vec b = random_vec(C, -1, 1, 902);
      const Vec gy = random_vec(N * C * S, -1, 1, 903);
      auto run = [&](const Vec& xv, const Vec& wv, const Vec& bv) {
        Vec out(xv.size()), m(N * G), r(N * G);
        cpu::groupnorm<double>(N, C, S, G, xv.data(), affine ? wv.data() : nullptr, affine ? bv.data() : nullptr,
                               eps, out.data(), m.data(), r.data());
        return out;
      };
      Vec y(x.size()), mean(N * G), rstd(N * G);
      cpu::groupnorm<double>(N, C, S, G, x.data(), affine ? w.data() : nullptr, affine ? b.data() : nullptr, eps,
                             y.data(), mean.data(), rstd.data());
      Vec gx(x.size()), gw(C, 0.25), gb(C, -0.5);
      cpu::groupnorm_backward<double>(N, C, S, G, x.data(), affine ? w.data() : nullptr, mean.data(), rstd.data(),
                                      gy.data(), gx.data(), affine ? gw.data() : nullptr,
                                      affine ? gb.data() : nullptr);
      expect_grad(gx, fd_grad(x, gy, [&](const Vec& xv) { return run(xv, w, b); }));
      if (!affine) continue;
      Vec want_w = fd_grad(w, gy, [&](const Vec& wv) { return run(x, wv, b); });
      Vec want_b = fd_grad(b, gy, [&](const Vec& bv) { return run(x, w, bv); });
      for (int64_t c = 0; c < C; ++c) {
        want_w[c] += 0.25;
        want_b[c] -= 0.5;
      }
      expect_grad(gw, want_w);
      expect_grad(gb, want_b);
    }
  }
}

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
