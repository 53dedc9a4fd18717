// The failure probe's training-step scenarios (failure_probe.cpp dispatches here): one rank of three fails inside
// a real training step of a small sharded model, where the failing point is reached through the library's own hook
// points, not a test-only branch:
//   backward   inside the backward of a sharded op: the engine's before-node hook (autograd/engine.h) fires as
//              backward reaches the second linear's nodes; the survivors then run that patch's backward, whose
//              weight-grad all_reduce over 'domain' the victim never joins.
//   bucket     inside the optimizer's bucketed reduction (deferred domain sums, optim/grad_buckets.h) with buckets of
//              256 KiB, so the model's grads make two: a LeafGradReadyHook made after the optimizer's fires once
//              the first bucket (the second linear's weight and bias) has started its all_reduce_async; the
//              survivors start it, and the second, and wait for the first in finish() (Optimizer::step).
// kill: the victim SIGKILLs itself 100 ms after reaching the point (still inside: its hook sleeps meanwhile); the
// survivors wait at the same point until it is dead, so the collective cannot complete with it alive.
// hang: the victim sleeps 100 s at the point; the survivors go straight on and time out.
#include "tests/mesh/failure_probe_step.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "autograd/engine.h"
#include "models/layers.h"
#include "optim/optimizer.h"
#include "patches/shard_tensor.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt::probe {

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// A two-layer sharded stack, linear -> layer_norm -> linear, 256 wide: each weight is 256 KiB of f32 grads, beyond
// every eager limit, so a sum the victim left cannot complete without it.
class Stack : public models::Module {
 public:
  static constexpr int64_t width = 256;
  Stack() : lin1(width, width, true, DType::f32), norm(width, DType::f32), lin2(width, width, true, DType::f32) {
    register_module("lin1", &lin1);
    register_module("norm", &norm);
    register_module("lin2", &lin2);
    Generator gen(7);
    lin1.init_torch_default(gen);
    lin2.init_torch_default(gen);
  }
  models::Linear lin1;
  models::LayerNorm norm;
  models::Linear lin2;
};

}  // namespace

bool run_step_fault(const std::string& fault, const std::string& where, bool victim, const std::function<void()>& wait_dead) {
  if (where != "backward" && where != "bucket") return false;
  SHARDRT_CHECK(fault == "kill" || fault == "hang", ValueError, "failure probe: unknown fault '", fault, "'");
  // The victim's act at the failure point; the survivors' (kill only: wait until it is dead).
  auto at_point = [&] {
    if (victim) {
      if (fault == "kill") {
        std::thread([] {
          sleep_ms(100);
          kill(getpid(), SIGKILL);
        }).detach();
      }
      sleep_ms(100000);
    } else if (fault == "kill") {
      wait_dead();
    }
  };

  Mesh mesh(MPI_COMM_WORLD, 1, 3);
  Stack model;
  optim::OptimizerConfig cfg;
  cfg.mode = optim::ShardingMode::ddp;  // ddp = 1: the buckets sum over the domain axis
  cfg.bucket_bytes = 256 << 10;
  optim::Optimizer opt(mesh, model, cfg);

  Generator gen(11);
  const Tensor x_full = randn({3 * 16, Stack::width}, {}, &gen);
  const Tensor g_full = randn({3 * 16, Stack::width}, {}, &gen);
  const Placements rows{Placement::Replicate(), Placement::Shard(0)};

  bool reached = false;
  std::shared_ptr<optim::DeferredDomainSums> deferred;
  std::optional<LeafGradReadyHook> survivors_wait, victim_stops;
  if (where == "bucket") {
    // Backward finishes the last parameters first: bucket 0 holds lin2's weight and bias (65,792 f32), the next
    // one the rest. Hooks are called in the order they were made: the survivors' (made before the optimizer's)
    // stops them at lin2's first final grad, before their bucket 0 can start; the victim's (made after) fires
    // once its bucket 0 is in flight, and only that one.
    const AutogradMeta* w2 = model.lin2.weight.autograd_meta().get();
    const AutogradMeta* b2 = model.lin2.bias.autograd_meta().get();
    survivors_wait.emplace([&, w2, b2](AutogradMeta& leaf) {
      if (!victim && !reached && (&leaf == w2 || &leaf == b2)) reached = true, at_point();
    });
    deferred = opt.defer_domain_grad_sums();
    SHARDRT_CHECK(deferred->buckets().size() >= 2, ValueError, "failure probe: expected several grad buckets, got ",
                  deferred->buckets().size());
    victim_stops.emplace([&](AutogradMeta&) {
      if (victim && !reached && deferred->start_order().size() == 1) reached = true, at_point();
    });
  }
  const ShardTensor x = distribute(x_full, mesh, rows);
  const ShardTensor h = model.norm.forward(model.lin1.forward(x));
  const uint64_t lin2_begin = next_node_sequence_nr();
  const ShardTensor y = model.lin2.forward(h);
  const uint64_t lin2_end = next_node_sequence_nr();
  SHARDRT_CHECK(lin2_end > lin2_begin, ValueError, "failure probe: the second linear recorded no node");
  BeforeNodeHook previous;
  if (where == "backward") {
    previous = set_before_node_hook([&](uint64_t seq) {
      if (!reached && seq >= lin2_begin && seq < lin2_end) reached = true, at_point();
    });
  }
  backward_global(y, g_full);
  opt.step();
  set_before_node_hook(previous);
  SHARDRT_CHECK(reached, ValueError, "failure probe: backward never reached the failure point '", where, "'");
  return true;
}

}  // namespace shardrt::probe
