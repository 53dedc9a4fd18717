// shardrt-demo: trains a small point-cloud model on a ddp x domain mesh and, step by step, next to the same
// model trained serially, so the agreement is visible.
//
// Model (a batch (B, N, C_in): N points with C_in features per sample): per-point MLP (linear, gelu, layer norm,
// linear), mean pool over the points, then a linear head; MSE against a per-sample target, over the whole batch.
// The canonical layout, on the ddp x domain mesh itself: samples Shard(0) over ddp (one per domain group), the
// points of a sample Shard(1) over domain (uneven: 37 points). Training is plain SGD: the patches sum each
// parameter's grad over the domain axis; reduce_batch_grads averages it over the ddp axis, once, before the step.
// The serial run (every rank computes it, on a one-rank mesh with the same axes) sees the whole batch: the same
// code and objective, so in fp64 the two losses agree to rounding.
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

// The batch's loss. `points` is (B, N, C_in), its samples over ddp and its points over domain, or replicated; the
// same code runs for both — the placements decide.
ShardTensor batch_loss(const ShardTensor& points, const ShardTensor& target, const Params& p) {
  check_one_sample_per_domain_group("demo model", points);
  const auto& w = p.all;
  ShardTensor h = gelu(linear(points, w[0], w[1]));
  h = layer_norm(h, {kHidden}, w[2], w[3]);
  h = linear(h, w[4], w[5]);
  // The mean over the points is Partial over domain; complete it there (the samples stay over ddp): (B, 1, H).
  ShardTensor partial = mean(h, {1}, /*keepdim=*/true);
  Placements whole = partial.placements();
  for (Placement& q : whole)
    if (q.is_partial()) q = Placement::Replicate();
  ShardTensor pred = linear(redistribute(partial, whole), w[6], w[7]);
  return mse_loss(pred, target);  // the mean over the whole batch, Replicate on every rank
}

// One SGD step: the parameter grads averaged over the batch (ddp) axis once, as every optimizer does.
void sgd_step(Params& p, const Mesh& mesh) {
  reduce_batch_grads(mesh, p.all);
  NoGradGuard no_grad;
  for (Tensor& t : p.all) {
    t.copy_(sub(t, mul_scalar(grad_of(t), kLearningRate)));
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
    const Mesh serial_mesh(MPI_COMM_SELF, mesh.axis_names(), {1, 1}, mesh.axis_roles());

    // Synthetic data, identical on every rank: one sample per ddp group.
    Generator data_gen(7);
    const Tensor xs = randn({ddp, kPoints, kIn}, {DType::f64}, &data_gen);
    const Tensor ys = randn({ddp, 1, kOut}, {DType::f64}, &data_gen);
    Params sharded = init_params(11), serial = clone_params(sharded);
    const Placement samples = Placement::Shard(0), points = Placement::Shard(1), R = Placement::Replicate();
    ShardTensor x_local = distribute(xs, mesh, {samples, points});
    ShardTensor y_local = distribute(ys, mesh, {samples, R});
    const ShardTensor x_serial = distribute(xs, serial_mesh, {R, R}), y_serial = distribute(ys, serial_mesh, {R, R});
    if (rank == 0)
      std::printf("ShardRT demo: %s, %ld points per sample sharded over domain (this rank holds %ld), %d samples\n",
                  mesh.str().c_str(), static_cast<long>(kPoints), static_cast<long>(x_local.local().size(1)), ddp);

    double worst = 0;
    for (int step = 0; step < kSteps; ++step) {
      // Sharded: this rank's sample and points; the loss is the whole batch's, on every rank.
      ShardTensor loss = batch_loss(x_local, y_local, sharded);
      backward(loss.local());
      const Tensor reported = loss.local().detach().clone();
      sgd_step(sharded, mesh);

      // Serial: the whole batch on one rank.
      ShardTensor total = batch_loss(x_serial, y_serial, serial);
      backward(total.local());
      sgd_step(serial, serial_mesh);

      double a = reported.item(), b = total.local().item();
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
