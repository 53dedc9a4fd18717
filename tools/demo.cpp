// shardrt-demo: trains a small point-cloud model on a ddp x domain mesh and, step by step, next to the same
// model trained serially, so the agreement is visible.
//
// Model (one sample = (1, N, C_in): N points with C_in features): per-point MLP (linear, gelu, layer norm, linear), global mean
// pool over the points, then a linear head; MSE against a per-sample target. The points of a sample are sharded
// over the domain axis (uneven: 37 points), samples over the ddp axis (one per domain group). Training is plain
// SGD: the patches sum each parameter's grad over the domain axis; the step averages it over the ddp axis.
// The serial run (every rank computes it, on a one-rank mesh) sees the whole batch and averages the per-sample
// losses, which is the same objective, so in fp64 the two losses agree to rounding.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "mesh/mesh.h"
#include "patches/domain_batch.h"
#include "patches/ops.h"
#include "patches/shard_tensor.h"
#include "runtime/factories.h"
#include "tools/mpi_session.h"

using namespace shardrt;

namespace {

constexpr int64_t kPoints = 37, kIn = 3, kHidden = 16, kOut = 2;
constexpr int kSteps = 20;
constexpr double kLearningRate = 0.05;

struct Params {
  std::vector<Tensor> all;  // w1, b1, ln_w, ln_b, w2, b2, w3, b3
};

Params init_params(uint64_t seed) {
  Generator gen(seed);
  auto p = [&](Shape s, double scale) {
    Tensor t = mul_scalar(randn(s, {DType::f64}, &gen), scale);
    set_requires_grad(t);
    return t;
  };
  return {{p({kHidden, kIn}, 0.5), p({kHidden}, 0.1), p({kHidden}, 0.1), p({kHidden}, 0.1), p({kHidden, kHidden}, 0.25),
           p({kHidden}, 0.1), p({kOut, kHidden}, 0.25), p({kOut}, 0.1)}};
}

Params clone_params(const Params& src) {
  Params out;
  for (const Tensor& t : src.all) {
    Tensor c = t.clone();
    set_requires_grad(c);
    out.all.push_back(c);
  }
  return out;
}

// One sample's loss. `points` is (1, N, C_in), sharded or not over the mesh's domain axis along the points; the
// same code runs for both — the placements decide.
ShardTensor sample_loss(const ShardTensor& points, const ShardTensor& target, const Params& p) {
  check_one_sample_per_domain_group("demo model", points);
  const auto& w = p.all;
  ShardTensor h = gelu(linear(points, w[0], w[1]));
  h = layer_norm(h, {kHidden}, w[2], w[3]);
  h = linear(h, w[4], w[5]);
  ShardTensor pooled = redistribute(mean(h, {1}, /*keepdim=*/true), {Placement::Replicate()});  // (1, 1, H)
  ShardTensor pred = linear(pooled, w[6], w[7]);
  return mse_loss(pred, target);
}

void sgd_step(Params& p, const Communicator* ddp) {
  NoGradGuard no_grad;
  for (Tensor& t : p.all) {
    Tensor g = grad_of(t).contiguous().clone();
    if (ddp) ddp->all_reduce(g, ReduceOp::mean);
    t.copy_(sub(t, mul_scalar(g, kLearningRate)));
    zero_grad(t);
  }
}

}  // namespace

int main(int argc, char** argv) {
  tools::MpiSession session(argc, argv);
  CLI::App app{"Trains a small point-cloud model on a ddp x domain mesh next to the same model trained serially."};
  if (const auto stop = session.parse(app, argc, argv)) return *stop;
  const int world = session.size(), rank = session.rank();
  int rc = 0;
  try {
    int domain = world >= 2 ? 2 : 1;
    if (world % domain != 0) domain = 1;
    Mesh mesh(MPI_COMM_WORLD, -1, domain);  // ddp x domain
    const int ddp = mesh.axis_size("ddp");
    // The sharded tensors live on the domain group of this rank; the ddp axis is the optimizer's.
    Mesh domain_mesh = mesh.sub("domain");
    Mesh serial_mesh = Mesh::one_d(MPI_COMM_SELF, "domain");

    // Synthetic data, identical on every rank: one sample per ddp group.
    Generator data_gen(7);
    std::vector<Tensor> xs, ys;
    for (int s = 0; s < ddp; ++s) {
      xs.push_back(randn({1, kPoints, kIn}, {DType::f64}, &data_gen));
      ys.push_back(randn({1, 1, kOut}, {DType::f64}, &data_gen));
    }
    Params sharded = init_params(11), serial = clone_params(sharded);
    const int my_sample = mesh.coord("ddp");
    ShardTensor x_local = distribute(xs[my_sample], domain_mesh, {Placement::Shard(1)});
    ShardTensor y_local = distribute(ys[my_sample], domain_mesh, {Placement::Replicate()});
    if (rank == 0)
      std::printf("ShardRT demo: %s, %ld points per sample sharded over domain (this rank holds %ld), %d samples\n",
                  mesh.str().c_str(), static_cast<long>(kPoints), static_cast<long>(x_local.local().size(1)), ddp);

    double worst = 0;
    for (int step = 0; step < kSteps; ++step) {
      // Sharded: this domain group's sample; the reported loss is the mean over ddp groups.
      ShardTensor loss = sample_loss(x_local, y_local, sharded);
      backward(loss.local());
      Tensor reported = loss.local().detach().clone();
      mesh.axis("ddp").all_reduce(reported, ReduceOp::mean);
      sgd_step(sharded, &mesh.axis("ddp"));

      // Serial: every sample on one rank, mean of the per-sample losses.
      Tensor total;
      for (int s = 0; s < ddp; ++s) {
        ShardTensor l = sample_loss(distribute(xs[s], serial_mesh, {Placement::Replicate()}),
                                    distribute(ys[s], serial_mesh, {Placement::Replicate()}), serial);
        Tensor ls = mul_scalar(l.local(), 1.0 / ddp);
        total = total.defined() ? add(total, ls) : ls;
      }
      backward(total);
      sgd_step(serial, nullptr);

      double a = reported.item(), b = total.item();
      worst = std::max(worst, std::abs(a - b));
      if (rank == 0) std::printf("step %2d  sharded loss %.15f  serial loss %.15f  |diff| %.1e\n", step, a, b, std::abs(a - b));
    }
    bool agree = worst < 1e-10;
    if (rank == 0)
      std::printf("max |sharded - serial| over %d steps = %.2e: %s\n", kSteps, worst,
                  agree ? "the sharded run matches the serial run (< 1e-10)" : "MISMATCH (>= 1e-10)");
    rc = agree ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardrt-demo: %s\n", e.what());
    rc = 2;
  }
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
