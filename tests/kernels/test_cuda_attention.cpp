// kernels/cuda/attention: what the op-level parity table (f32, f64) cannot reach. The 16-bit instantiations
// against the f64 CPU oracle on the same rounded inputs, the empty cases, a null grad_lse, head dim 128,
// run-to-run bit equality, and the log-sum-exp merge. Skipped, with a warning, without a CUDA device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "runtime/half.h"
#include "tests/kernels/cuda_testing.h"
#include "tests/support/compare.h"
#include "tests/support/cuda_skip.h"

namespace cu = shardrt::kernels::cuda;
namespace cpu = shardrt::kernels::cpu;
using namespace shardrt;
using namespace shardrt::test;

namespace {

// Element conversions for the buffer types the CUDA kernels take.
template <typename T>
T to_elem(double x) {
  if constexpr (std::is_same_v<T, bf16>) return float_to_bf16(static_cast<float>(x));
  else if constexpr (std::is_same_v<T, f16>) return float_to_f16(static_cast<float>(x));
  else return static_cast<T>(x);
}
template <typename T>
double from_elem(T x) {
  if constexpr (std::is_same_v<T, bf16>) return bf16_to_float(x);
  else if constexpr (std::is_same_v<T, f16>) return f16_to_float(x);
  else return static_cast<double>(x);
}
template <typename T>
std::vector<T> to_elems(const Vec& v) {
  std::vector<T> out;
  for (double x : v) out.push_back(to_elem<T>(x));
  return out;
}
template <typename T>
Vec from_elems(const std::vector<T>& v) {
  Vec out;
  for (const T& x : v) out.push_back(from_elem(x));
  return out;
}
template <typename T>
Vec rounded_to(const Vec& v) {
  return from_elems(to_elems<T>(v));
}

struct Problem {
  int64_t BH, Nq, Nk, D, Dv;
};

// The f64 oracle's forward and backward on the given (already rounded) inputs.
struct Oracle {
  Vec out, lse, gq, gk, gv;
};
Oracle oracle(const Problem& p, double scale, const Vec& q, const Vec& k, const Vec& v, const Vec& go,
              const Vec* glse) {
  Oracle o{Vec(p.BH * p.Nq * p.Dv), Vec(p.BH * p.Nq), Vec(p.BH * p.Nq * p.D), Vec(p.BH * p.Nk * p.D),
           Vec(p.BH * p.Nk * p.Dv)};
  cpu::attention_forward<double>(p.BH, p.Nq, p.Nk, p.D, p.Dv, scale, q.data(), k.data(), v.data(), o.out.data(),
                                 o.lse.data());
  cpu::attention_backward<double>(p.BH, p.Nq, p.Nk, p.D, p.Dv, scale, q.data(), k.data(), v.data(), o.out.data(),
                                  o.lse.data(), go.data(), glse ? glse->data() : nullptr, o.gq.data(), o.gk.data(),
                                  o.gv.data());
  return o;
}

// One CUDA forward and backward in T; the backward is fed the CUDA forward's own out and lse.
template <typename T>
Oracle run_cuda(const Problem& p, double scale, const Vec& q, const Vec& k, const Vec& v, const Vec& go,
                const Vec* glse) {
  using A = cu::AccumT<T>;
  DeviceBuffer<T> dq(to_elems<T>(q)), dk(to_elems<T>(k)), dv(to_elems<T>(v)), dgo(to_elems<T>(go));
  DeviceBuffer<T> dout(p.BH * p.Nq * p.Dv), dgq(p.BH * p.Nq * p.D), dgk(p.BH * p.Nk * p.D), dgv(p.BH * p.Nk * p.Dv);
  DeviceBuffer<A> dlse(p.BH * p.Nq), dglse(glse ? cast<A>(*glse) : std::vector<A>{});
  // Garbage in the outputs: every element must be overwritten.
  dgq.upload(to_elems<T>(Vec(p.BH * p.Nq * p.D, kNaN)));
  dgk.upload(to_elems<T>(Vec(p.BH * p.Nk * p.D, kNaN)));
  dgv.upload(to_elems<T>(Vec(p.BH * p.Nk * p.Dv, kNaN)));
  cu::attention_forward<T>(p.BH, p.Nq, p.Nk, p.D, p.Dv, static_cast<A>(scale), dq.get(), dk.get(), dv.get(),
                           dout.get(), dlse.get(), stream());
  cu::attention_backward<T>(p.BH, p.Nq, p.Nk, p.D, p.Dv, static_cast<A>(scale), dq.get(), dk.get(), dv.get(),
                            dout.get(), dlse.get(), dgo.get(), glse ? dglse.get() : nullptr, dgq.get(), dgk.get(),
                            dgv.get(), stream());
  return {from_elems(dout.download()), widen(dlse.download()), from_elems(dgq.download()),
          from_elems(dgk.download()), from_elems(dgv.download())};
}

template <typename T>
void check_against_oracle(const Problem& p, double tol, uint64_t seed, bool with_glse) {
  INFO("BH=" << p.BH << " Nq=" << p.Nq << " Nk=" << p.Nk << " D=" << p.D << " Dv=" << p.Dv);
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.D));
  const Vec q = rounded_to<T>(random_vec(p.BH * p.Nq * p.D, -2, 2, seed));
  const Vec k = rounded_to<T>(random_vec(p.BH * p.Nk * p.D, -2, 2, seed + 1));
  const Vec v = rounded_to<T>(random_vec(p.BH * p.Nk * p.Dv, seed + 2));
  const Vec go = rounded_to<T>(random_vec(p.BH * p.Nq * p.Dv, seed + 3));
  const Vec glse = rounded_to<float>(random_vec(p.BH * p.Nq, seed + 4));
  const Oracle want = oracle(p, scale, q, k, v, go, with_glse ? &glse : nullptr);
  const Oracle got = run_cuda<T>(p, scale, q, k, v, go, with_glse ? &glse : nullptr);
  require_close(got.out, want.out, tol);
  require_close(got.lse, want.lse, tol);
  require_close(got.gq, want.gq, tol);
  require_close(got.gk, want.gk, tol);
  require_close(got.gv, want.gv, tol);
}

}  // namespace

TEST_CASE("cuda attention in f32, bf16 and f16 against the f64 oracle", "[cuda][kernels]") {
  if (skip_without_cuda()) return;
  // Several query and key tiles with ragged last tiles; head dims 64, 128 and odd ones with Dv != D.
  const std::vector<Problem> problems = {{3, 45, 77, 64, 64}, {2, 33, 70, 33, 17}, {1, 20, 65, 128, 128}};
  for (const Problem& p : problems) {
    check_against_oracle<float>(p, 2e-5, 10, true);
    check_against_oracle<double>(p, 1e-11, 20, true);
    // 16-bit outputs and grads are rounded once from f32 sums: a few units of their last place.
    check_against_oracle<bf16>(p, 2e-2, 30, true);
    check_against_oracle<f16>(p, 4e-3, 40, false);
  }
}

TEST_CASE("cuda attention: no keys, no queries, a null grad_lse, and two runs agree bit for bit", "[cuda][kernels]") {
  if (skip_without_cuda()) return;
  const double scale = 0.5;
  {  // No keys: out = 0, lse = -inf, grad_q = 0.
    const Problem p{2, 5, 0, 8, 4};
    const Vec q = random_vec(p.BH * p.Nq * p.D, 50), go = random_vec(p.BH * p.Nq * p.Dv, 51);
    const Oracle got = run_cuda<float>(p, scale, q, {}, {}, go, nullptr);
    CHECK(got.out == Vec(p.BH * p.Nq * p.Dv, 0.0));
    CHECK(got.lse == Vec(p.BH * p.Nq, -kInf));
    CHECK(got.gq == Vec(p.BH * p.Nq * p.D, 0.0));
  }
  {  // No queries: grad_k = grad_v = 0.
    const Problem p{2, 0, 6, 8, 4};
    const Vec k = random_vec(p.BH * p.Nk * p.D, 52), v = random_vec(p.BH * p.Nk * p.Dv, 53);
    const Oracle got = run_cuda<float>(p, scale, {}, k, v, {}, nullptr);
    CHECK(got.gk == Vec(p.BH * p.Nk * p.D, 0.0));
    CHECK(got.gv == Vec(p.BH * p.Nk * p.Dv, 0.0));
  }
  // A null grad_lse is a zero grad_lse; reruns give the same bits (the backward has no atomics).
  const Problem p{2, 40, 50, 24, 24};
  const Vec q = random_vec(p.BH * p.Nq * p.D, 60), k = random_vec(p.BH * p.Nk * p.D, 61);
  const Vec v = random_vec(p.BH * p.Nk * p.Dv, 62), go = random_vec(p.BH * p.Nq * p.Dv, 63);
  const Vec zeros(p.BH * p.Nq, 0.0);
  const Oracle a = run_cuda<float>(p, scale, q, k, v, go, nullptr);
  const Oracle b = run_cuda<float>(p, scale, q, k, v, go, &zeros);
  CHECK(a.out == b.out);
  CHECK(a.lse == b.lse);
  CHECK(a.gq == b.gq);
  CHECK(a.gk == b.gk);
  CHECK(a.gv == b.gv);
}

TEST_CASE("cuda attention_merge of two key blocks equals attention over their union", "[cuda][kernels]") {
  if (skip_without_cuda()) return;
  const int64_t BH = 3, Nq = 7, D = 5, Dv = 6, Nk1 = 9, Nk2 = 4;
  const float scale = 0.4f;
  const Vec q = random_vec(BH * Nq * D, 70);
  const Vec k1 = random_vec(BH * Nk1 * D, 71), v1 = random_vec(BH * Nk1 * Dv, 72);
  const Vec k2 = random_vec(BH * Nk2 * D, 73), v2 = random_vec(BH * Nk2 * Dv, 74);
  DeviceBuffer<float> dq(cast<float>(q)), dk1(cast<float>(k1)), dv1(cast<float>(v1)), dk2(cast<float>(k2)),
      dv2(cast<float>(v2));
  DeviceBuffer<float> out1(BH * Nq * Dv), lse1(BH * Nq), out2(BH * Nq * Dv), lse2(BH * Nq);
  cu::attention_forward<float>(BH, Nq, Nk1, D, Dv, scale, dq.get(), dk1.get(), dv1.get(), out1.get(), lse1.get(),
                               stream());
  cu::attention_forward<float>(BH, Nq, Nk2, D, Dv, scale, dq.get(), dk2.get(), dv2.get(), out2.get(), lse2.get(),
                               stream());
  // The running result starts empty (0, -inf): merging block 1 copies it, merging block 2 folds it in.
  DeviceBuffer<float> acc(std::vector<float>(BH * Nq * Dv, 0.0f));
  DeviceBuffer<float> lse(std::vector<float>(BH * Nq, -std::numeric_limits<float>::infinity()));
  cu::attention_merge<float>(BH * Nq, Dv, acc.get(), lse.get(), out1.get(), lse1.get(), stream());
  CHECK(acc.download() == out1.download());
  cu::attention_merge<float>(BH * Nq, Dv, acc.get(), lse.get(), out2.get(), lse2.get(), stream());

  // The oracle over the union of the keys, per head: block 1's keys then block 2's.
  Vec k, v;
  for (int64_t h = 0; h < BH; ++h) {
    k.insert(k.end(), k1.begin() + h * Nk1 * D, k1.begin() + (h + 1) * Nk1 * D);
    k.insert(k.end(), k2.begin() + h * Nk2 * D, k2.begin() + (h + 1) * Nk2 * D);
    v.insert(v.end(), v1.begin() + h * Nk1 * Dv, v1.begin() + (h + 1) * Nk1 * Dv);
    v.insert(v.end(), v2.begin() + h * Nk2 * Dv, v2.begin() + (h + 1) * Nk2 * Dv);
  }
  Vec want_out(BH * Nq * Dv), want_lse(BH * Nq);
  cpu::attention_forward<double>(BH, Nq, Nk1 + Nk2, D, Dv, scale, q.data(), k.data(), v.data(), want_out.data(),
                                 want_lse.data());
  require_close(acc.download(), want_out, 1e-5);
  require_close(lse.download(), want_lse, 1e-5);
  // A block with no keys (lse_b = -inf) leaves the running result alone.
  const std::vector<float> before = acc.download();
  DeviceBuffer<float> none_lse(std::vector<float>(BH * Nq, -std::numeric_limits<float>::infinity()));
  cu::attention_merge<float>(BH * Nq, Dv, acc.get(), lse.get(), out1.get(), none_lse.get(), stream());
  CHECK(acc.download() == before);
}
