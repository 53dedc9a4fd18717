// optim/device_update.h: the update rules on Tensors. On the CPU they are the raw loops of adamw.h / sgd.h /
// muon.h plus the parameter copy; on cuda:0 (skipped without a GPU) the fused kernels must track those loops over
// several steps, master weights and state included, and write the 16-bit copy of the updated weights. And
// runtime/cuda/graph.h: a whole training step on cuda:0 captured once and replayed equals the eager step. Then the
// optimizer on CUDA parameters (the tiny ViT and FLARE against their CPU run), optim/captured_step.h (N replays
// equal N eager steps bit for bit, schedule and bias corrections included) and the index ops' device-side check.
#include <catch2/catch.hpp>

#include <cmath>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "kernels/cuda/index.h"
#include "optim/captured_step.h"
#include "optim/device_update.h"
#include "optim/optimizer.h"
#include "runtime/cuda/graph.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "tests/models/golden_testing.h"
#include "tests/optim/optim_testing.h"
#include "tests/patches/patch_testing.h"
#include "tests/support/cuda_skip.h"

using namespace shardrt;
using namespace shardrt::optim;
using namespace shardrt::test;

namespace {

// Worst |a - b| / (1 + |b|) over two tensors of any device and dtype.
double worst(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to(Device::cpu()).to_vector(), y = b.to(Device::cpu()).to_vector();
  REQUIRE(x.size() == y.size());
  double w = 0;
  for (size_t i = 0; i < x.size(); ++i) w = std::max(w, std::abs(x[i] - y[i]) / (1 + std::abs(y[i])));
  return w;
}

// The state of one rule on one device: weights, two state buffers and the model's bf16 copy.
struct UpdateState {
  Tensor p, m, v, copy;
};
UpdateState make_state(DType dtype, Device device, uint64_t seed, int64_t rows, int64_t cols) {
  Generator gen(seed);
  const TensorOptions f64{DType::f64};
  UpdateState s{randn({rows, cols}, f64, &gen).to(dtype).to(device), zeros({rows, cols}, {dtype, device}),
                zeros({rows, cols}, {dtype, device}), zeros({rows, cols}, {DType::bf16, device})};
  return s;
}
Tensor grad_for_step(DType dtype, Device device, int step, int64_t rows, int64_t cols) {
  Generator gen(500 + step);
  return randn({rows, cols}, {DType::f64}, &gen).to(dtype).to(device);
}

enum class Rule { adamw, sgd_nesterov, muon };

// Three steps of `rule` on `device`; returns the final state.
UpdateState run_rule(Rule rule, DType dtype, Device device, int64_t rows, int64_t cols) {
  UpdateState s = make_state(dtype, device, 42, rows, cols);
  const AdamWOptions adamw{1e-2, 0.9, 0.99, 1e-8, 0.05};
  const SGDOptions sgd{1e-2, 0.9, 0.0, 1e-3, true};
  MuonOptions muon;
  muon.lr = 2e-2;
  for (int step = 1; step <= 3; ++step) {
    const Tensor g = grad_for_step(dtype, device, step, rows, cols);
    switch (rule) {
      case Rule::adamw: adamw_update(s.p, g, s.m, s.v, adamw, adamw.lr, step, s.copy); break;
      case Rule::sgd_nesterov: sgd_update(s.p, g, s.m, sgd, sgd.lr, step, s.copy); break;
      case Rule::muon: muon_update(s.p, g, s.m, rows, cols, muon, muon.lr, s.copy); break;
    }
  }
  return s;
}

}  // namespace

TEST_CASE("device_update on the cpu: the raw loops, the bf16 copy, and typed errors", "[optim]") {
  for (Rule rule : {Rule::adamw, Rule::sgd_nesterov, Rule::muon}) {
    INFO("rule " << static_cast<int>(rule));
    const UpdateState s = run_rule(rule, DType::f32, Device::cpu(), 6, 4);
    // The weights moved, and the copy is exactly their bf16 rounding.
    CHECK(worst(s.p, make_state(DType::f32, Device::cpu(), 42, 6, 4).p) > 1e-3);
    CHECK(s.copy.to_vector() == s.p.to(DType::bf16).to_vector());
  }
  // Against the raw loop on the same data.
  UpdateState a = make_state(DType::f64, Device::cpu(), 7, 3, 5);
  const Tensor g = grad_for_step(DType::f64, Device::cpu(), 1, 3, 5);
  std::vector<double> p = a.p.to_vector(), m(15, 0.0), v(15, 0.0), gv = g.to_vector();
  const AdamWOptions o;
  adamw_update(a.p, g, a.m, a.v, o, 1e-3, 1);
  adamw_update<double>(p.data(), gv.data(), m.data(), v.data(), 15, o, 1e-3, 1);
  CHECK(a.p.to_vector() == p);
  CHECK(a.v.to_vector() == v);

  const Tensor wrong_dtype = zeros({3, 5}, {DType::f32});
  CHECK_THROWS_AS(adamw_update(a.p, wrong_dtype, a.m, a.v, o, 1e-3, 2), DTypeError);
  const Tensor wrong_size = zeros({14}, {DType::f64});
  CHECK_THROWS_AS(sgd_update(a.p, g, wrong_size, SGDOptions{1e-2, 0.9}, 1e-2, 1), ShapeError);
  CHECK_THROWS_AS(sgd_update(a.p, g, Tensor(), SGDOptions{1e-2, 0.9}, 1e-2, 1), ValueError);
  CHECK_THROWS_AS(muon_update(a.p, g, a.m, 5, 4, MuonOptions{}, 1e-2), ShapeError);
}

TEST_CASE("device_update on cuda:0 tracks the cpu loops over three steps, state and bf16 copy included",
          "[optim][cuda]") {
  if (test::skip_without_cuda()) return;
  // A wide and a tall matrix for Muon's two Newton–Schulz orientations.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{6, 40}, {70, 9}}) {
    for (Rule rule : {Rule::adamw, Rule::sgd_nesterov, Rule::muon}) {
      for (DType dtype : {DType::f32, DType::f64}) {
        INFO("rule " << static_cast<int>(rule) << " " << dtype_name(dtype) << " " << rows << "x" << cols);
        const UpdateState want = run_rule(rule, dtype, Device::cpu(), rows, cols);
        const UpdateState got = run_rule(rule, dtype, Device::cuda(0), rows, cols);
        const double tol = dtype == DType::f64 ? 1e-12 : 2e-6;
        CHECK(worst(got.p, want.p) <= tol);
        CHECK(worst(got.m, want.m) <= tol);
        CHECK(worst(got.v, want.v) <= tol);
        // The copy is the bf16 rounding of the device's own weights.
        CHECK(got.copy.to(Device::cpu()).to_vector() == got.p.to(Device::cpu()).to(DType::bf16).to_vector());
      }
    }
  }
}

namespace {

// A two-layer MLP's training step on cuda:0 with every persistent tensor allocated up front: parameters, grads
// bound to their own buffers, AdamW state, the input, the target, the grad seed and the loss slot. The step
// queues only device work, so it can run eagerly or be captured into a CUDA graph.
struct DeviceStep {
  std::vector<Tensor> params, grads, m, v;
  Tensor x, y, seed, loss_slot;

  DeviceStep() {
    const Device dev = Device::cuda(0);
    Generator gen(90);
    for (const Shape& s : {Shape{32, 16}, Shape{32}, Shape{8, 32}, Shape{8}}) {
      Tensor p = randn(s, {DType::f64}, &gen, 0.0, 0.3).to(DType::f32).to(dev);
      set_requires_grad(p);
      Tensor g = zeros(s, {DType::f32, dev});
      bind_grad(p, g);
      params.push_back(p);
      grads.push_back(g);
      m.push_back(zeros(s, {DType::f32, dev}));
      v.push_back(zeros(s, {DType::f32, dev}));
    }
    x = randn({64, 16}, {DType::f64}, &gen).to(DType::f32).to(dev);
    y = randn({64, 8}, {DType::f64}, &gen).to(DType::f32).to(dev);
    seed = ones({}, {DType::f32, dev});
    loss_slot = zeros({1}, {DType::f32, dev});
  }

  // Forward, backward, (no grad reduction on one rank), the fused AdamW update, and the loss into its slot.
  // The step number is a host scalar baked into a captured graph, so every step here uses the same one.
  void run() {
    for (Tensor& p : params) zero_grad(p);
    const Tensor h = gelu(linear(x, params[0], params[1]));
    const Tensor loss = mse_loss(linear(h, params[2], params[3]), y);
    backward({loss}, {seed});
    loss_slot.copy_(loss.reshape({1}));
    const AdamWOptions o{1e-2, 0.9, 0.99, 1e-8, 0.01};
    for (size_t i = 0; i < params.size(); ++i) adamw_update(params[i], grads[i], m[i], v[i], o, o.lr, 5);
  }

  // Every persistent tensor's values, copied to the host.
  std::vector<std::vector<double>> snapshot() const {
    std::vector<std::vector<double>> out;
    for (const auto* list : {&params, &m, &v})
      for (const Tensor& t : *list) out.push_back(t.to(Device::cpu()).to_vector());
    return out;
  }
  // Puts the values of a snapshot back, in place (the captured graph keeps pointing at the same storage).
  void restore(const std::vector<std::vector<double>>& s) {
    size_t k = 0;
    for (auto* list : {&params, &m, &v})
      for (Tensor& t : *list) t.copy_(from_vector(s[k++], t.shape(), {DType::f32}));
  }
};

}  // namespace

TEST_CASE("a CUDA graph of a training step replays the eager step bit for bit, loss slot included",
          "[optim][cuda]") {
  if (!cuda_available()) {
    // Without a usable device there is nothing to capture on: a typed error, not a crash.
    CudaGraph graph;
    CHECK_THROWS_AS(graph.capture(0, [] {}), DeviceError);
    CHECK_FALSE(graph.captured());
  }
  if (test::skip_without_cuda()) return;
  DeviceStep step;
  const auto initial = step.snapshot();
  std::vector<double> eager_losses;
  for (int i = 0; i < 3; ++i) {
    step.run();
    eager_losses.push_back(step.loss_slot.to(Device::cpu()).item());
  }
  const auto eager_final = step.snapshot();
  CHECK(eager_losses[2] < eager_losses[0]);  // the step trains

  step.restore(initial);
  CudaGraph graph;
  graph.capture(0, [&] { step.run(); });
  REQUIRE(graph.captured());
  CHECK(step.snapshot() == initial);  // capturing queues nothing
  std::vector<double> replay_losses;
  for (int i = 0; i < 3; ++i) {
    graph.replay();
    replay_losses.push_back(step.loss_slot.to(Device::cpu()).item());
  }
  CHECK(replay_losses == eager_losses);
  CHECK(step.snapshot() == eager_final);
}

// ---- the optimizer on CUDA parameters, and the whole step in one graph (optim/captured_step.h) -------------------

namespace {

// The tiny golden ViT and FLARE (tests/data/golden), in f32, one sample per step.
struct TinyCase {
  std::string golden;
  std::vector<std::pair<std::string, Shape>> inputs;  // with the batch dim
  Shape output;
};
const std::vector<TinyCase>& tiny_cases() {
  static const std::vector<TinyCase> cases = {
      {"vit2d", {{"x", {1, 3, 32, 24}}}, {1, 5}},
      {"flare_irregular", {{"fx", {1, 37, 3}}, {"embedding", {1, 37, 5}}}, {1, 37, 2}},
  };
  return cases;
}

OptimizerConfig cuda_test_config() {
  OptimizerConfig c;
  c.algorithm = Algorithm::adamw;
  // eps 1e-3: AdamW divides by sqrt(v) + eps, so a grad that is rounding noise (exactly zero in exact arithmetic,
  // and different on the two devices) would move its weight by a full lr with a small eps; 1e-3 keeps such noise
  // below the parity bound while every real grad still takes an Adam-sized step.
  c.adamw = {.lr = 1e-2, .eps = 1e-3, .weight_decay = 0.01};
  c.max_grad_norm = 0.5;  // on: the device norm and coefficient are part of what is compared
  c.schedule = warmup_cosine_schedule(1, 6, 0.1, 0.1);
  return c;
}

// A model, its optimizer on one device, and fixed input, target and seed buffers that each step refills in place
// (so a captured graph, which keeps pointing at them, sees the new batch).
struct DeviceTrainer {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<Optimizer> opt;
  std::map<std::string, ShardTensor> inputs;
  std::vector<Tensor> input_buffers;
  Tensor target, seed;

  // The model runs on `mesh`; the optimizer on `opt_mesh` (default: the same) in `mode`.
  DeviceTrainer(const Mesh& mesh, const TinyCase& tc, Device device, const Mesh* opt_mesh = nullptr,
                ShardingMode mode = ShardingMode::replicated) {
    model = golden_model(load_golden(tc.golden));
    model->to_dtype(DType::f32);
    model->to(device);
    OptimizerConfig oc = cuda_test_config();
    oc.mode = mode;
    opt = std::make_unique<Optimizer>(opt_mesh ? *opt_mesh : mesh, *model, oc);
    for (const auto& [name, shape] : tc.inputs) {
      Tensor buffer = zeros(shape, {DType::f32, device});
      input_buffers.push_back(buffer);
      // The buffer itself as the local tensor (one rank: the local shape is the global one), so refilling it in
      // place is what the next step, eager or replayed, reads.
      inputs[name] = ShardTensor(buffer, distribute(buffer, mesh, model->input_placements(name, shape, mesh)).spec());
    }
    target = zeros(tc.output, {DType::f32, device});
    seed = ones({}, {DType::f32, device});
  }
  // Batch `k`: the same values on every device (made on the host, copied in place).
  void load_batch(const TinyCase& tc, int k) {
    for (size_t i = 0; i < tc.inputs.size(); ++i)
      input_buffers[i].copy_(rnd(tc.inputs[i].second, 300 + 10 * k + i).to(DType::f32));
    target.copy_(rnd(tc.output, 400 + k).to(DType::f32));
  }
  // Forward and backward only: what a CapturedStep captures besides the optimizer.
  Tensor forward_backward() {
    const std::vector<ShardTensor> out = model->forward(inputs);
    const Tensor loss = mse_loss(out.at(0).local(), target);
    backward({loss}, {seed});
    return loss;
  }
  double eager_step() {
    const Tensor loss = forward_backward();
    REQUIRE(opt->step());
    return loss.item();
  }
};

// Largest |a - b| over all parameters, divided by the largest |b|.
double param_error(const models::Module& got, const models::Module& want) {
  const auto a = values(got), b = values(want);
  REQUIRE(a.size() == b.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < b[i].size(); ++j) {
      err = std::max(err, std::abs(a[i][j] - b[i][j]));
      scale = std::max(scale, std::abs(b[i][j]));
    }
  return err / scale;
}

}  // namespace

TEST_CASE("Module::to moves parameters and buffers in place; a CPU optimizer refuses to capture", "[optim]") {
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  auto model = golden_model(load_golden("vit2d"));
  const auto before = values(*model);
  const auto names = model->named_parameters();
  model->to(Device::cpu());  // already there: nothing changes
  CHECK(values(*model) == before);
  CHECK(model->named_parameters().size() == names.size());
  if (!cuda_available()) {
    // No device: moving is a typed error, and the model is left usable on the CPU.
    CHECK_THROWS_AS(model->to(Device::cuda(0)), DeviceError);
    CHECK(model->named_parameters().front().second.device().is_cpu());
  }
  Optimizer opt(serial, *model, cuda_test_config());
  CHECK(opt.device().is_cpu());
  CHECK_THROWS_AS(CapturedStep(opt, [] { return Tensor(); }, 3), DeviceError);
}

TEST_CASE("the tiny ViT and FLARE train 3 steps on cuda:0 like on the cpu (AdamW, clipping, warm-up schedule)",
          "[optim][cuda]") {
  if (test::skip_without_cuda()) return;
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  for (const TinyCase& tc : tiny_cases()) {
    INFO(tc.golden);
    DeviceTrainer cpu(serial, tc, Device::cpu()), gpu(serial, tc, Device::cuda(0));
    REQUIRE(gpu.opt->device() == Device::cuda(0));
    REQUIRE(gpu.model->named_parameters().front().second.device() == Device::cuda(0));
    for (int k = 0; k < 3; ++k) {
      cpu.load_batch(tc, k);
      gpu.load_batch(tc, k);
      const double want = cpu.eager_step(), got = gpu.eager_step();
      const double norm_cpu = cpu.opt->last_grad_norm(), norm_gpu = gpu.opt->last_grad_norm();
      std::printf("cuda parity %s step %d: loss cpu %.9g cuda %.9g; grad norm cpu %.9g cuda %.9g\n",
                  tc.golden.c_str(), k + 1, want, got, norm_cpu, norm_gpu);
      // f32 forward and backward in a different summation order (cuBLAS vs OpenBLAS, tree vs serial sums):
      // relative differences of ~1e-6 per op, compounding over the model's few dozen ops.
      CHECK(std::abs(got - want) <= 1e-4 * (1 + std::abs(want)));
      CHECK(std::abs(norm_gpu - norm_cpu) <= 1e-4 * (1 + norm_cpu));
    }
    const double err = param_error(*gpu.model, *cpu.model);
    std::printf("cuda parity %s: max parameter difference after 3 steps %.3g of the largest |parameter|\n",
                tc.golden.c_str(), err);
    // Bound 1e-4 relative: each AdamW step moves a weight by about lr (1e-2) times m / (sqrt(v) + eps), whose
    // relative error is the grads' (~1e-5 here); three steps add three such terms, 3e-7 absolute, far below.
    // The bound leaves room for the grads' f32 noise meeting eps (see cuda_test_config) and the master's f32
    // rounding, and fails on any real difference (a skipped clip, a wrong step count or lr: ~1e-3 and more).
    CHECK(err <= 1e-4);
    CHECK(param_error(*gpu.model, *golden_model(load_golden(tc.golden))) > 1e-3);  // the weights did move
  }
}

TEST_CASE("the optimizer on cuda:0 over the world mesh (ddp and mesh modes) steps like the cpu on one rank",
          "[optim][cuda][cuda_ranks]") {
  if (test::skip_without_cuda()) return;
  // Every rank runs the same model on the same batch (the model on its own one-rank mesh), so the ddp mean of the
  // grads is each rank's grad: the sharded device arenas, the reduce-scatter, the clipping norm summed over the
  // shards and the all-gather must reproduce the plain CPU run. With ranks sharing one GPU the collectives are
  // staged through the host by the MPI backend.
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  const Mesh world(MPI_COMM_WORLD, world_size(), 1);
  const TinyCase& tc = tiny_cases().front();
  for (ShardingMode mode : {ShardingMode::ddp, ShardingMode::mesh}) {
    INFO(sharding_mode_name(mode) << " over " << world.str());
    DeviceTrainer cpu(serial, tc, Device::cpu()), gpu(serial, tc, Device::cuda(0), &world, mode);
    for (int k = 0; k < 3; ++k) {
      cpu.load_batch(tc, k);
      gpu.load_batch(tc, k);
      cpu.eager_step();
      gpu.eager_step();
    }
    const double err = param_error(*gpu.model, *cpu.model);
    std::printf("cuda %s over %d rank(s), rank %d: max parameter difference %.3g\n", sharding_mode_name(mode),
                world_size(), world_rank(), err);
    CHECK(same_on_every_rank(err <= 1e-4));  // the bound of the single-rank parity case, for the same reasons
  }
}

TEST_CASE("a captured training step of the tiny ViT and FLARE replays like eager steps, bit for bit",
          "[optim][cuda]") {
  if (test::skip_without_cuda()) return;
  const Mesh serial(MPI_COMM_SELF, 1, 1);
  constexpr int kSteps = 4;
  for (const TinyCase& tc : tiny_cases()) {
    INFO(tc.golden);
    DeviceTrainer eager(serial, tc, Device::cuda(0)), replayed(serial, tc, Device::cuda(0));
    // One eager step each first: cuBLAS handles, workspaces and pool blocks come into being outside the capture.
    for (DeviceTrainer* t : {&eager, &replayed}) {
      t->load_batch(tc, 0);
      t->eager_step();
    }
    std::vector<double> eager_losses, replay_losses;
    for (int k = 1; k <= kSteps; ++k) {
      eager.load_batch(tc, k);
      eager_losses.push_back(eager.eager_step());
    }
    CapturedStep step(*replayed.opt, [&] { return replayed.forward_backward(); }, kSteps);
    CHECK(replayed.opt->steps_taken() == 1);  // capturing ran nothing
    for (int k = 1; k <= kSteps; ++k) {
      replayed.load_batch(tc, k);
      step.replay();
      replay_losses.push_back(step.loss_slot().item());
    }
    step.check();
    CHECK(replayed.opt->steps_taken() == eager.opt->steps_taken());
    for (int k = 0; k < kSteps; ++k)
      std::printf("captured %s step %d: eager loss %.9g replayed %.9g\n", tc.golden.c_str(), k + 2,
                  eager_losses[static_cast<size_t>(k)], replay_losses[static_cast<size_t>(k)]);
    CHECK(replay_losses == eager_losses);
    const double err = param_error(*replayed.model, *eager.model);
    std::printf("captured %s: parameter difference replay vs eager %.3g\n", tc.golden.c_str(), err);
    CHECK(err == 0);
    CHECK(eager_losses.back() != eager_losses.front());  // the steps did train (different batches, moved weights)
    CHECK_THROWS_AS(step.replay(), ValueError);          // the planned steps are used up
  }
}

TEST_CASE("index ops inside a CUDA graph check their indices on the device", "[optim][cuda]") {
  if (test::skip_without_cuda()) return;
  const Device dev = Device::cuda(0);
  const Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, {DType::f32}).to(dev);
  const Tensor index = from_vector({2, 0}, {2}, {DType::i64}).to(dev);
  Tensor out = zeros({2, 2}, {DType::f32, dev});
  kernels::cuda::index_error_flag(0);
  cuda_synchronize(0);
  CudaGraph graph;
  graph.capture(0, [&] { out.copy_(index_select(x, 0, index)); });
  graph.replay();
  CHECK(out.to(Device::cpu()).to_vector() == std::vector<double>{5, 6, 1, 2});
  CHECK_FALSE(kernels::cuda::take_index_error(0));
  // A bad index written into the captured index buffer: flagged, and nothing outside x is read (zeros instead).
  index.copy_(from_vector({7, 0}, {2}, {DType::i64}));
  graph.replay();
  CHECK(out.to(Device::cpu()).to_vector() == std::vector<double>{0, 0, 1, 2});
  CHECK(kernels::cuda::take_index_error(0));
  CHECK_FALSE(kernels::cuda::take_index_error(0));  // read and cleared
  // Eagerly the host check still names the value.
  CHECK_THROWS_AS(index_select(x, 0, index), ValueError);
}
