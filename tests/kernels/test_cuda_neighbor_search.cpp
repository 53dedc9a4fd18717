// kernels/cuda/neighbor_search: the device block merge gives the CPU's lists exactly (distances bit for bit, the
// tie order by global index), for knn and radius search, over several blocks merged in any order, with duplicate
// points (exact ties), a radius that admits fewer than k, and k larger than the block. The op level (knn and
// radius_search on device tensors) is covered by the patch tests on cuda:0. Skipped without a CUDA device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/neighbor_search.h"
#include "kernels/cuda/neighbor_search.h"
#include "tests/kernels/cuda_testing.h"
#include "tests/support/compare.h"
#include "tests/support/cuda_skip.h"

namespace cpu = shardrt::kernels::cpu;
namespace cu = shardrt::kernels::cuda;
using namespace shardrt::test;

namespace {

// Points on a coarse grid, so that many distances tie exactly.
Vec grid_points(int64_t n, int64_t d, uint64_t seed) {
  Vec v = random_vec(n * d, -1, 1, seed);
  for (double& e : v) e = std::round(e * 3) / 3;
  return v;
}

// The device lists as the CPU's NeighborLists.
cpu::NeighborLists read_lists(const DeviceBuffer<double>& d2, const DeviceBuffer<int64_t>& index,
                              const DeviceBuffer<int64_t>& count, int64_t nq, int64_t k) {
  const std::vector<double> h_d2 = d2.download();
  const std::vector<int64_t> h_index = index.download(), h_count = count.download();
  cpu::NeighborLists lists(static_cast<size_t>(nq));
  for (int64_t i = 0; i < nq; ++i) {
    for (int64_t j = 0; j < h_count[i]; ++j) lists[i].emplace_back(h_d2[i * k + j], h_index[i * k + j]);
  }
  return lists;
}

}  // namespace

TEST_CASE("cuda neighbour search merges blocks into the cpu's lists exactly, ties and radius included",
          "[cuda][kernels]") {
  if (skip_without_cuda()) return;
  const int64_t d = 3, nq = 300;
  // Three blocks of points (the last larger than a shared-memory tile), global offsets in order.
  const std::vector<int64_t> sizes = {40, 7, 1500};
  std::vector<Vec> blocks;
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (size_t b = 0; b < sizes.size(); ++b) {
    blocks.push_back(grid_points(sizes[b], d, 40 + b));
    offsets.push_back(offset);
    offset += sizes[b];
  }
  const Vec q = grid_points(nq, d, 50);
  struct Search {
    int64_t k;
    double radius2;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const Search searches[] = {{1, inf}, {8, inf}, {60, inf}, {16, 0.25}, {5, 0.0}};
  // Blocks merged in order, and in reverse: the lists must not depend on it.
  const std::vector<std::vector<size_t>> orders = {{0, 1, 2}, {2, 1, 0}};
  for (const Search& s : searches) {
    for (const auto& order : orders) {
      INFO("k=" << s.k << " radius2=" << s.radius2 << " first block " << order[0]);
      cpu::NeighborLists want(static_cast<size_t>(nq));
      for (size_t b : order) cpu::merge_block_brute(want, q.data(), blocks[b].data(), sizes[b], d, offsets[b], s.k,
                                                    s.radius2);
      DeviceBuffer<double> dq(q), d2(static_cast<size_t>(nq * s.k));
      DeviceBuffer<int64_t> index(static_cast<size_t>(nq * s.k)), count(std::vector<int64_t>(nq, 0));
      for (size_t b : order) {
        DeviceBuffer<double> pts(blocks[b]);
        cu::merge_block_brute(nq, dq.get(), pts.get(), sizes[b], d, offsets[b], s.k, s.radius2, d2.get(),
                              index.get(), count.get(), stream());
        shardrt::cuda_synchronize(0);  // pts goes out of scope
      }
      const cpu::NeighborLists got = read_lists(d2, index, count, nq, s.k);
      int64_t mismatched = 0, filled = 0;
      for (int64_t i = 0; i < nq; ++i) {
        mismatched += got[i] != want[i];
        filled += static_cast<int64_t>(want[i].size());
      }
      CHECK(filled > 0);
      CHECK(mismatched == 0);
    }
  }
}
