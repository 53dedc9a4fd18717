// kernels/cpu/attention: the blocked online-softmax forward against the naive softmax(scale·QKᵀ)·V, no keys, and
// the backward against central finite differences with and without grad_lse.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "kernels/cpu/attention.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/kernels/cpu_kernel_cases.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEST_CASE("attention forward matches the naive softmax(scale·QKᵀ)·V", "[kernels][cpu][attention]") {
  // Sizes straddle the 64-wide query and key blocks; Nq != Nk and D != Dv.
  for (AttnShape shape : {AttnShape{3, 70, 131, 5, 3}, AttnShape{2, 1, 65, 4, 7}, AttnShape{2, 129, 64, 8, 8},
                          AttnShape{1, 64, 200, 16, 12}, AttnShape{2, 3, 1, 2, 2}}) {
    INFO("BH " << shape.BH << " Nq " << shape.Nq << " Nk " << shape.Nk << " D " << shape.D << " Dv " << shape.Dv);
    const AttnData data(shape, 11);
    Vec out, lse, want_out, want_lse;
    data.forward(out, lse);
    ref_attention(shape.BH, shape.Nq, shape.Nk, shape.D, shape.Dv, data.scale, data.q, data.k, data.v, want_out,
                  want_lse);
    require_close(out, want_out, 1e-12);
    require_close(lse, want_lse, 1e-12);
  }
}

TEST_CASE("attention with no keys gives zero output and lse = -inf", "[kernels][cpu][attention]") {
  const AttnData data({2, 5, 0, 3, 2}, 5);
  Vec out(data.s.BH * data.s.Nq * data.s.Dv, 7.0), lse(data.s.BH * data.s.Nq, 7.0);
  cpu::attention_forward<double>(2, 5, 0, 3, 2, data.scale, data.q.data(), data.k.data(), data.v.data(),
                                 out.data(), lse.data());
  for (double o : out) REQUIRE(o == 0.0);
  for (double l : lse) REQUIRE((std::isinf(l) && l < 0));

  const Vec grad_out = random_vec(out.size(), 6);
  Vec grad_q(data.q.size(), 7.0), grad_k, grad_v;
  cpu::attention_backward<double>(2, 5, 0, 3, 2, data.scale, data.q.data(), data.k.data(), data.v.data(),
                                  out.data(), lse.data(), grad_out.data(), nullptr, grad_q.data(), grad_k.data(),
                                  grad_v.data());
  for (double g : grad_q) REQUIRE(g == 0.0);
}

TEST_CASE("attention backward matches finite differences, with and without grad_lse", "[kernels][cpu][attention]") {
  for (AttnShape shape : {AttnShape{3, 70, 131, 5, 3}, AttnShape{2, 1, 65, 4, 7}}) {
    for (bool with_lse : {false, true}) {
      INFO("Nq " << shape.Nq << " Nk " << shape.Nk << (with_lse ? " with grad_lse" : " without grad_lse"));
      AttnData data(shape, 21);
      const Vec grad_out = random_vec(shape.BH * shape.Nq * shape.Dv, 31);
      const Vec grad_lse = random_vec(shape.BH * shape.Nq, 32);
      Vec out, lse;
      data.forward(out, lse);
      Vec gq(data.q.size()), gk(data.k.size()), gv(data.v.size());
      cpu::attention_backward<double>(shape.BH, shape.Nq, shape.Nk, shape.D, shape.Dv, data.scale, data.q.data(),
                                      data.k.data(), data.v.data(), out.data(), lse.data(), grad_out.data(),
                                      with_lse ? grad_lse.data() : nullptr, gq.data(), gk.data(), gv.data());
      auto loss = [&] {
        Vec o, l;
        data.forward(o, l);
        return dot(o, grad_out) + (with_lse ? dot(l, grad_lse) : 0.0);
      };
      check_gradient(data.q, gq, loss);
      check_gradient(data.k, gk, loss);
      check_gradient(data.v, gv, loss);
    }
  }
}
