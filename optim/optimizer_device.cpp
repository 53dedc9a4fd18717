// The optimizer's step on CUDA parameters (optim/optimizer.h, "CUDA parameters"): clipping with the norm kept on
// the device, and the AdamW / SGD updates reading the learning rate and step count from device memory. Nothing
// here reads the device from the host, so a whole step can be captured into a CUDA graph (optim/captured_step.h).
#include <cstring>

#include "kernels/cuda/optim_update.h"
#include "optim/clip.h"
#include "optim/device_update.h"
#include "optim/optimizer.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt::optim {

namespace cuda = kernels::cuda;

namespace {

cuda::DeviceStepScalars* scalars_of(const Tensor& bytes) {
  return static_cast<cuda::DeviceStepScalars*>(bytes.raw_data());
}

cuda::StepRules rules_of(const OptimizerConfig& c) {
  cuda::StepRules r;
  r.adamw_lr = c.adamw.lr;
  r.beta1 = c.adamw.beta1;
  r.beta2 = c.adamw.beta2;
  r.adamw_weight_decay = c.adamw.weight_decay;
  r.sgd_lr = c.sgd.lr;
  r.muon_lr = c.muon.lr;
  return r;
}

template <typename F>
void with_master_type(DType master, F&& f) {
  if (master == DType::f64) f(double{});
  else f(float{});
}

}  // namespace

void Optimizer::device_setup() {
  SHARDRT_CHECK(config_.mode != ShardingMode::zero3, DeviceError, "optimizer: mode zero3 with parameters on ",
                device_.str(),
                " is not supported yet (its gathers run on host arenas); use mode ddp or mesh, which shard the "
                "optimizer state over the ranks, or train zero3 on the CPU");
  current_stream(device_.index);  // DeviceError now, naming the device, when it is not usable
  step_scalars_ = zeros({static_cast<int64_t>(sizeof(cuda::DeviceStepScalars))}, {DType::u8, device_});
  clip_slots_ = zeros({3 + cuda::kSquarePartials}, {DType::f64, device_});
  write_device_step();
}

void Optimizer::write_device_step() {
  cuda::DeviceStepScalars host;
  host.step = steps_;
  Tensor bytes = Tensor::empty({static_cast<int64_t>(sizeof host)}, DType::u8);
  std::memcpy(bytes.raw_data(), &host, sizeof host);
  step_scalars_.copy_(bytes);
}

void Optimizer::scale_grad(Tensor& t, double s) {
  if (device_.is_cpu()) return scale_in_place(t, s);
  if (t.numel() == 0 || s == 1.0) return;
  with_master_type(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    cuda::scale_by<T>(t.numel(), t.data<T>(), nullptr, s, current_stream(device_.index));
  });
}

double Optimizer::clip_on_device(std::vector<Group>& groups) {
  auto scope = mesh_.flat().ledger().scope("clip");
  const CudaStream stream = current_stream(device_.index);
  Tensor sq = clip_slots_.narrow(0, 0, 1);
  sq.zero_();
  double* partials = clip_slots_.data<double>() + 3;
  for (const Group& g : groups)
    with_master_type(g.master_dtype, [&](auto tag) {
      using T = decltype(tag);
      cuda::sum_squares_add<T>(g.grad_shard.numel(), g.grad_shard.template data<T>(), partials, sq.data<double>(),
                               stream);
    });
  // The same ranks as the CPU path sum their disjoint shards' squares (optimizer.cpp, clip).
  const Communicator* over = nullptr;
  if (plan_.mode == ShardingMode::ddp && !plan_.batch_axis.empty() && plan_.batch_ranks > 1)
    over = &mesh_.axis(plan_.batch_axis);
  if (plan_.mode == ShardingMode::mesh && mesh_.size() > 1) over = &mesh_.flat();
  if (over) over->all_reduce(sq);
  double* slots = clip_slots_.data<double>();
  cuda::clip_coefficient(slots, config_.max_grad_norm, slots + 1, slots + 2, stream);
  for (Group& g : groups)
    with_master_type(g.master_dtype, [&](auto tag) {
      using T = decltype(tag);
      cuda::scale_by<T>(g.grad_shard.numel(), g.grad_shard.template data<T>(), slots + 2, 1.0, stream);
    });
  return 0;  // the norm stays on the device; last_grad_norm() reads it
}

void Optimizer::update_on_device(Group& g, double factor) {
  const CudaStream stream = current_stream(device_.index);
  cuda::DeviceStepScalars* s = scalars_of(step_scalars_);
  // Once per step, before the first group's update (update() runs right after ++steps_, group by group).
  if (&g == &groups_.front()) {
    const double* table = lr_table_.defined() ? lr_table_.data<double>() : nullptr;
    const int64_t n_table = lr_table_.defined() ? lr_table_.numel() : 0;
    cuda::advance_step(s, table, n_table, lr_table_first_, factor, rules_of(config_), stream);
  }
  const int64_t begin = g.layout.shard_begin(plan_.own_shard), n = g.layout.shard_numel;
  const cuda::AdamWHyper adamw{0, config_.adamw.beta1, config_.adamw.beta2, config_.adamw.eps,
                               config_.adamw.weight_decay, 0};
  const cuda::SGDHyper sgd{0, config_.sgd.momentum, config_.sgd.dampening, config_.sgd.weight_decay,
                           config_.sgd.nesterov, 0};
  with_master_type(g.master_dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = g.master.template data<T>();
    const T* grad = g.grad_shard.template data<T>();
    std::vector<T*> state;
    for (auto& [k, t] : g.state) state.push_back(t.template data<T>());
    if (config_.algorithm == Algorithm::sgd) {
      // Elementwise with one rule: the whole shard in one pass (padding has zero grads and stays zero).
      cuda::sgd_update_scheduled<T>(n, p, grad, state.empty() ? nullptr : state[0], sgd, s, {}, stream);
      return;
    }
    if (config_.algorithm == Algorithm::adamw) {
      cuda::adamw_update_scheduled<T>(n, p, grad, state[0], state[1], adamw, s, {}, stream);
      return;
    }
    // muon_adamw: slot by slot, as the CPU does; Muon's rate is a host scalar (a capture refuses Muon).
    for (size_t i = 0; i < g.layout.slots.size(); ++i) {
      const ArenaSlot& slot = g.layout.slots[i];
      const int64_t lo = std::max(slot.offset, begin), hi = std::min(slot.offset + slot.numel, begin + n);
      if (lo >= hi) continue;
      const int64_t at = lo - begin, count = hi - lo;
      if (g.muon[i]) {
        const cuda::MuonHyper h =
            muon_kernel_hyper(config_.muon, config_.muon.lr * factor, slot.shape[0], slot.shape[1]);
        cuda::muon_update<T>(slot.shape[0], slot.shape[1], p + at, grad + at, state[2] + at, h, {}, stream);
      } else {
        cuda::adamw_update_scheduled<T>(count, p + at, grad + at, state[0] + at, state[1] + at, adamw, s, {},
                                        stream);
      }
    }
  });
}

}  // namespace shardrt::optim
