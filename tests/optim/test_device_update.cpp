// optim/device_update.h: the update rules on Tensors. On the CPU they are the raw loops of adamw.h / sgd.h /
// muon.h plus the parameter copy; on cuda:0 (skipped without a GPU) the fused kernels must track those loops over
// several steps, master weights and state included, and write the 16-bit copy of the updated weights. And
// runtime/cuda/graph.h: a whole training step on cuda:0 captured once and replayed equals the eager step.
#include <catch2/catch.hpp>

#include <cmath>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "optim/device_update.h"
#include "runtime/cuda/graph.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "tests/support/cuda_skip.h"

using namespace shardrt;
using namespace shardrt::optim;

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
