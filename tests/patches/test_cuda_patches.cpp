// Patches on device tensors: representative sharded ops of the families with CUDA kernels run on the mesh's GPU
// against the serial fp64 oracle on the CPU (check_sharded with ShardedCase::device), and knn / radius search on
// device points equal the CPU's results exactly. With two ranks on one GPU the collectives stage device buffers
// through MPI (NCCL refuses two ranks on one device); with a GPU per rank they go through NCCL. The whole patch
// suite runs the same way under SHARDRT_CHECK_DEVICE=cuda (patches/check_sharded.h). Skipped without a GPU.
#include <cmath>

#include "tests/patches/patch_testing.h"
#include "tests/support/cuda_skip.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

ShardedFn one(std::function<ShardTensor(const ShardTensor&)> f) {
  return [f](const std::vector<ShardTensor>& in, const std::vector<Tensor>&) {
    return std::vector<ShardTensor>{f(in[0])};
  };
}

// The case on the line mesh's GPU; passes when the sharded device run matches the serial oracle.
void check_on_device(const ShardedFn& fn, ShardedCase c) {
  const Mesh& line = line_mesh();
  c.device = line.device();
  const ShardedCheckResult r = check_sharded(line, fn, c);
  INFO(r.report);
  CHECK(r.ok);
}

}  // namespace

TEST_CASE("patches on cuda: halo conv, pooling, upsampling, padding, group_norm, linear chains", "[patch][cuda]") {
  if (skip_without_cuda()) return;
  REQUIRE(line_mesh().device().is_cuda());
  const int p = line_mesh().size();
  for (const ExtentsCase& e : extents_cases(13, p)) {
    INFO("extents " << e.name);
    const AxisExtents along{e.extents};
    ShardedCase conv_case =
        sharded_case("conv2d halo " + e.name, {rnd({1, 2, 13, 5}, 500)}, {on_line(S(2))}, {along});
    conv_case.params = {rnd({3, 2, 3, 3}, 501), rnd({3}, 502)};
    check_on_device(
        [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
          return std::vector<ShardTensor>{conv(in[0], w[0], w[1], {1}, {1})};
        },
        conv_case);

    check_on_device(one([](const ShardTensor& x) { return max_pool(x, {3}, {1}, {1}); }),
                    sharded_case("max_pool k3 s1 " + e.name, {rnd({2, 2, 13}, 503)}, {on_line(S(2))}, {along}));
    check_on_device(one([](const ShardTensor& x) { return avg_pool(x, {3}, {1}, {1}); }),
                    sharded_case("avg_pool k3 s1 " + e.name, {rnd({2, 2, 13}, 504)}, {on_line(S(2))}, {along}));
    check_on_device(one([](const ShardTensor& x) { return upsample_linear(x, {39}); }),
                    sharded_case("upsample linear x3 " + e.name, {rnd({2, 2, 13}, 505)}, {on_line(S(2))}, {along}));
    check_on_device(one([](const ShardTensor& x) { return pad(x, {2, 1}, PadMode::circular); }),
                    sharded_case("pad circular " + e.name, {rnd({2, 2, 13}, 506)}, {on_line(S(2))}, {along}));

    ShardedCase gn = sharded_case("group_norm S(2) " + e.name, {add_scalar(rnd({2, 4, 13}, 507), 3.0)},
                                  {on_line(S(2))}, {along});
    gn.params = {rnd({4}, 508), rnd({4}, 509)};
    check_on_device(
        [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
          return std::vector<ShardTensor>{group_norm(in[0], 2, w[0], w[1])};
        },
        gn);

    ShardedCase chain = sharded_case("linear, layer_norm, softmax S(0) " + e.name, {rnd({13, 6}, 510)},
                                     {on_line(S(0))}, {along});
    chain.params = {rnd({5, 6}, 511), rnd({5}, 512)};
    check_on_device(
        [](const std::vector<ShardTensor>& in, const std::vector<Tensor>& w) {
          return std::vector<ShardTensor>{softmax(layer_norm(linear(in[0], w[0], w[1]), {5}), -1)};
        },
        chain);
  }
}

TEST_CASE("patches on cuda: knn and radius search on device points equal the cpu's results", "[point_cloud][cuda]") {
  if (skip_without_cuda()) return;
  const Mesh& line = line_mesh();
  const Device dev = line.device();
  REQUIRE(dev.is_cuda());
  // Points on a coarse lattice: duplicates and equal distances, so the tie order is exercised.
  std::vector<double> lattice = rnd({300, 3}, 520).to_vector();
  for (double& x : lattice) x = std::round(x * 2) / 2;
  const Tensor points = from_vector(lattice, {300, 3}, {DType::f64}), queries = rnd({50, 3}, 521);
  for (const ExtentsCase& e : extents_cases(300, line.size())) {
    const ShardTensor pts_cpu = distribute(points, line, on_line(S(0)), {{e.extents}});
    const ShardTensor qs_cpu = distribute(queries, line, on_line(S(0)));
    const ShardTensor pts_dev = distribute(points.to(dev), line, on_line(S(0)), {{e.extents}});
    const ShardTensor qs_dev = distribute(queries.to(dev), line, on_line(S(0)));
    auto same = [](const Neighbors& got, const Neighbors& want) {
      CHECK(got.index.device().is_cuda());
      CHECK_SAME_VALUES(full_tensor(got.index).to(Device::cpu()), full_tensor(want.index));
      CHECK_SAME_VALUES(full_tensor(got.distance).to(Device::cpu()), full_tensor(want.distance));
      CHECK_SAME_VALUES(full_tensor(got.count).to(Device::cpu()), full_tensor(want.count));
    };
    for (int64_t k : {1, 9}) {
      INFO("knn k " << k << ", points " << e.name);
      same(knn(pts_dev, qs_dev, k), knn(pts_cpu, qs_cpu, k));
    }
    INFO("radius 0.75, points " << e.name);
    same(radius_search(pts_dev, qs_dev, 0.75, 12), radius_search(pts_cpu, qs_cpu, 0.75, 12));
  }
}
