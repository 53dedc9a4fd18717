// kernels/cpu/shape_ops: cat / split / copy_block as inverse copies, and pad in every mode against PyTorch's
// F.pad values and a mirroring reference, pad_backward against finite differences.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cpu/shape_ops.h"
#include "tests/support/compare.h"
#include "tests/support/reference.h"
#include "tests/kernels/cpu_kernel_cases.h"

namespace cpu = shardrt::kernels::cpu;
using namespace shardrt::test;

TEST_CASE("cat and split along the middle dim are inverse copies", "[kernels][cpu][shape]") {
  const int64_t outer = 3, inner = 2;
  const std::vector<int64_t> part_n = {2, 0, 3, 1};
  std::vector<Vec> parts;
  for (size_t p = 0; p < part_n.size(); ++p) parts.push_back(random_vec(outer * part_n[p] * inner, 120 + p));
  std::vector<const double*> part_ptrs;
  for (const Vec& p : parts) part_ptrs.push_back(p.data());
  const int64_t total = 6;
  Vec out(outer * total * inner);
  cpu::cat<double>(outer, inner, int64_t(parts.size()), part_ptrs.data(), part_n.data(), out.data());
  Vec want;
  for (int64_t o = 0; o < outer; ++o)
    for (size_t p = 0; p < parts.size(); ++p)
      want.insert(want.end(), parts[p].begin() + o * part_n[p] * inner, parts[p].begin() + (o + 1) * part_n[p] * inner);
  require_close(out, want, 0.0);

  std::vector<Vec> back;
  std::vector<double*> back_ptrs;
  for (int64_t n : part_n) back.emplace_back(outer * n * inner, 9.0);
  for (Vec& b : back) back_ptrs.push_back(b.data());
  cpu::split<double>(outer, inner, int64_t(parts.size()), out.data(), part_n.data(), back_ptrs.data());
  for (size_t p = 0; p < parts.size(); ++p) require_close(back[p], parts[p], 0.0);

  Vec block(2 * 3, 0.0);
  const Vec grid = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // 3 × 4
  cpu::copy_block<double>(2, 3, grid.data() + 5, 4, block.data(), 3);
  require_close(block, {5, 6, 7, 9, 10, 11}, 0.0);
}

TEST_CASE("pad matches PyTorch's F.pad values", "[kernels][cpu][shape]") {
  const Vec x = {1, 2, 3, 4};
  const int64_t in[1] = {4};
  auto run = [&](cpu::PadMode mode, int64_t lo, int64_t hi) {
    Vec y(4 + lo + hi);
    cpu::pad<double>(mode, 1, 1, in, &lo, &hi, 9.0, x.data(), y.data());
    return y;
  };
  require_close(run(cpu::PadMode::reflect, 2, 2), {3, 2, 1, 2, 3, 4, 3, 2}, 0.0);
  require_close(run(cpu::PadMode::replicate, 2, 1), {1, 1, 1, 2, 3, 4, 4}, 0.0);
  require_close(run(cpu::PadMode::circular, 2, 1), {3, 4, 1, 2, 3, 4, 1}, 0.0);
  require_close(run(cpu::PadMode::constant, 1, -2), {9, 1, 2}, 0.0);
  require_close(run(cpu::PadMode::constant, -1, -1), {2, 3}, 0.0);
}

TEST_CASE("pad and pad_backward in 1, 2 and 3 d for every mode", "[kernels][cpu][shape]") {
  struct Case {
    int nd;
    std::vector<int64_t> in, lo, hi;
  };
  const std::vector<Case> cases = {
      {1, {5}, {2}, {3}}, {2, {4, 5}, {1, 3}, {2, 0}}, {3, {3, 4, 3}, {1, 0, 2}, {2, 1, 1}}};
  const Case crop{2, {5, 6}, {-1, 2}, {1, -3}};
  const int64_t outer = 2;
  for (cpu::PadMode mode : {cpu::PadMode::constant, cpu::PadMode::reflect, cpu::PadMode::replicate,
                            cpu::PadMode::circular}) {
    std::vector<Case> all = cases;
    all.push_back(crop);
    for (const Case& c : all) {
      INFO("mode " << int(mode) << " nd " << c.nd << " lo " << c.lo[0]);
      std::vector<int64_t> out(c.nd);
      for (int d = 0; d < c.nd; ++d) out[d] = c.in[d] + c.lo[d] + c.hi[d];
      Vec x = random_vec(outer * prod(c.in.data(), c.nd), 130);
      const Vec gy = random_vec(outer * prod(out.data(), c.nd), 131);
      Vec y(gy.size());
      cpu::pad<double>(mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), -5.0, x.data(), y.data());
      require_close(y, ref_pad(mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), -5.0, x), 0.0);

      Vec gx(x.size(), 9.0);
      cpu::pad_backward<double>(mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), gy.data(), gx.data());
      check_gradient(x, gx, [&] {
        Vec out_y(gy.size());
        cpu::pad<double>(mode, c.nd, outer, c.in.data(), c.lo.data(), c.hi.data(), -5.0, x.data(), out_y.data());
        return dot(out_y, gy);
      });
    }
  }
}
