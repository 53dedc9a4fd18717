// kernels/cpu/index: index_select / index_add and gather / scatter_add, each pair checked as adjoints by finite
// differences, with repeated indices.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/index.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEST_CASE("index_select and index_add (its adjoint) with repeated indices", "[kernels][cpu][index]") {
  const int64_t outer = 3, n_src = 5, inner = 4, n_idx = 6;
  const std::vector<int64_t> idx = {4, 0, 2, 4, 4, 1};
  Vec src = random_vec(outer * n_src * inner, 100);
  Vec out(outer * n_idx * inner);
  cpu::index_select<double>(outer, n_src, inner, src.data(), n_idx, idx.data(), out.data());
  Vec want(out.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n_idx; ++j)
      for (int64_t i = 0; i < inner; ++i) want[(o * n_idx + j) * inner + i] = src[(o * n_src + idx[j]) * inner + i];
  require_close(out, want, 0.0);

  const Vec g = random_vec(out.size(), 101);
  Vec grad(src.size(), 0.0);
  cpu::index_add<double>(outer, n_src, inner, grad.data(), n_idx, idx.data(), g.data());
  check_gradient(src, grad, [&] {
    Vec y(g.size());
    cpu::index_select<double>(outer, n_src, inner, src.data(), n_idx, idx.data(), y.data());
    return dot(y, g);
  });
  // index_add accumulates on top of what dst holds; row 3 is never indexed.
  Vec acc(src.size(), 1.0);
  cpu::index_add<double>(outer, n_src, inner, acc.data(), n_idx, idx.data(), g.data());
  for (size_t e = 0; e < acc.size(); ++e) REQUIRE(acc[e] == Approx(grad[e] + 1.0).epsilon(1e-15));
  REQUIRE(acc[3 * inner] == 1.0);
}

TEST_CASE("gather and scatter_add (its adjoint) along the middle dim", "[kernels][cpu][index]") {
  const int64_t outer = 2, n_src = 4, inner = 3, n_idx = 5;
  std::vector<int64_t> idx(outer * n_idx * inner);
  std::mt19937_64 gen(7);
  for (int64_t& e : idx) e = int64_t(gen() % n_src);
  Vec src = random_vec(outer * n_src * inner, 110);
  Vec out(idx.size());
  cpu::gather<double>(outer, n_src, inner, src.data(), n_idx, idx.data(), out.data());
  Vec want(out.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n_idx; ++j)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (o * n_idx + j) * inner + i;
        want[at] = src[(o * n_src + idx[at]) * inner + i];
      }
  require_close(out, want, 0.0);

  const Vec g = random_vec(out.size(), 111);
  Vec grad(src.size(), 0.0);
  cpu::scatter_add<double>(outer, n_src, inner, grad.data(), n_idx, idx.data(), g.data());
  check_gradient(src, grad, [&] {
    Vec y(g.size());
    cpu::gather<double>(outer, n_src, inner, src.data(), n_idx, idx.data(), y.data());
    return dot(y, g);
  });
}
