// CUDA buffers: every collective, ring shift and halo exchange gives the same result as on host buffers, over
// the automatic transport (NCCL with one GPU per rank, else MPI through pinned memory) and over forced MPI
// staging. Skipped where no CUDA device is visible.
#include "mesh/mesh.h"
#include "mesh_testing.h"
#include "runtime/cuda_context.h"
#include "tests/support/cuda_skip.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

void check_same(const Tensor& on_device, const Tensor& on_host) {
  REQUIRE(on_device.device().is_cuda());
  CHECK(on_device.to(Device::cpu()).to_vector() == on_host.to_vector());
}

void run_suite(const Communicator& c, Device dev) {
  const int p = c.size(), r = c.rank();
  auto both = [&](const std::vector<double>& v, DType t) {
    return std::make_pair(tensor_of(v, t), tensor_of(v, t, dev));
  };
  std::vector<int64_t> counts(p);
  for (int j = 0; j < p; ++j) counts[j] = j % 2 == 0 ? j + 1 : 0;  // uneven, with zero-size segments
  const int64_t total = prefix(counts).back();
  for (DType t : all_dtypes()) {
    INFO(dtype_name(t) << " on " << dev.str() << " axis " << c.axis());
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      auto [h, d] = both(gen_vec(r, 33), t);
      c.all_reduce(h, op);
      c.all_reduce(d, op);
      check_same(d, h);
    }
    {
      auto [h, d] = both(gen_vec(r, 9), t);
      c.broadcast(h, p - 1);
      c.broadcast(d, p - 1);
      check_same(d, h);
    }
    {
      auto [h, d] = both(gen_vec(r, counts[r]), t);
      Tensor ho = Tensor::empty({total}, t), dout = Tensor::empty({total}, t, dev);
      c.all_gather_v(h, ho, counts);
      c.all_gather_v(d, dout, counts);
      check_same(dout, ho);
      auto [h2, d2] = both(gen_vec(r, 4), t);
      Tensor ho2 = Tensor::empty({4 * p}, t), do2 = Tensor::empty({4 * p}, t, dev);
      c.all_gather(h2, ho2);
      c.all_gather(d2, do2);
      check_same(do2, ho2);
    }
    {
      auto [h, d] = both(gen_vec(r, total, 1), t);
      Tensor ho = Tensor::empty({counts[r]}, t), dout = Tensor::empty({counts[r]}, t, dev);
      c.reduce_scatter_v(h, ho, counts);
      c.reduce_scatter_v(d, dout, counts);
      check_same(dout, ho);
      auto [h2, d2] = both(gen_vec(r, 3 * p, 1), t);
      Tensor ho2 = Tensor::empty({3}, t), do2 = Tensor::empty({3}, t, dev);
      c.reduce_scatter(h2, ho2);
      c.reduce_scatter(d2, do2);
      check_same(do2, ho2);
    }
    {
      std::vector<int64_t> sc(p), rc(p);
      for (int j = 0; j < p; ++j) sc[j] = (r + j) % 3, rc[j] = (j + r) % 3;
      auto [h, d] = both(gen_vec(r, prefix(sc).back(), 2), t);
      Tensor ho = Tensor::empty({prefix(rc).back()}, t), dout = Tensor::empty({prefix(rc).back()}, t, dev);
      c.all_to_all_v(h, sc, ho, rc);
      c.all_to_all_v(d, sc, dout, rc);
      check_same(dout, ho);
    }
    {
      auto [h, d] = both(gen_vec(r, r + 1, 3), t);
      const int prev = (r + p - 1) % p;
      Tensor ho = Tensor::empty({prev + 1}, t), dout = Tensor::empty({prev + 1}, t, dev);
      c.ring_shift(h, ho);
      c.ring_shift_async(d, dout).wait();
      check_same(dout, ho);
    }
  }
  // Halo along an inner (strided) dim and the outer one, with unequal widths.
  HaloWidths w{std::vector<int64_t>(p), std::vector<int64_t>(p)};
  for (int j = 0; j < p; ++j) w.left[j] = j % 2 + 1, w.right[j] = (j + 1) % 2 + 1;
  const int64_t ext = w.left[r] + 4 + w.right[r];
  for (int dim : {0, 1}) {
    Shape s = dim == 0 ? Shape{ext, 3} : Shape{2, ext};
    Tensor h = tensor_of(gen_vec(r, ext * (dim == 0 ? 3 : 2), 4), DType::f32).view(s);
    Tensor d = h.to(dev);
    c.halo_exchange(h, dim, w);
    c.halo_exchange_async(d, dim, w).wait();
    check_same(d, h);
  }
  // f32 accumulation of bf16 on the device.
  auto [h, d] = both(gen_vec(r, 10), DType::bf16);
  c.all_reduce(h, ReduceOp::sum, Accumulate::f32);
  c.all_reduce(d, ReduceOp::sum, Accumulate::f32);
  check_same(d, h);
}

}  // namespace

TEST_CASE("cuda: collectives on CUDA buffers match the host (automatic transport)", "[mesh][cuda]") {
  if (skip_without_cuda()) return;
  Mesh mesh = Mesh::one_d(MPI_COMM_WORLD);
  REQUIRE(mesh.device().is_cuda());
  mesh.axis("domain").init_cuda();
  INFO((mesh.axis("domain").nccl_usable() ? "NCCL" : "MPI staged through pinned memory"));
  run_suite(mesh.axis("domain"), mesh.device());
}

TEST_CASE("cuda: MPI transport stages CUDA buffers through pinned memory", "[mesh][cuda]") {
  if (skip_without_cuda()) return;
  CommOptions o;
  o.cuda_transport = CudaTransport::mpi_staged;
  Mesh mesh(MPI_COMM_WORLD, -1, 1, o);
  run_suite(mesh.axis("ddp"), mesh.device());
}
