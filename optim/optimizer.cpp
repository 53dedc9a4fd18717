#include "optim/optimizer.h"

#include <cmath>
#include <map>

#include "autograd/tape.h"
#include "optim/clip.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt::optim {

namespace {

bool low_precision(DType d) { return d == DType::bf16 || d == DType::f16; }

std::vector<std::string> state_kinds(const OptimizerConfig& c) {
  switch (c.algorithm) {
    case Algorithm::adamw:
      return {"exp_avg", "exp_avg_sq"};
    case Algorithm::sgd:
      return c.sgd.momentum != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
    case Algorithm::muon_adamw:
      return {"exp_avg", "exp_avg_sq", "momentum_buffer"};
  }
  return {};
}

}  // namespace

Optimizer::Optimizer(const Mesh& mesh, models::Module& module, OptimizerConfig config)
    : mesh_(mesh), config_(std::move(config)), plan_(plan_sharding(mesh, config_.mode)) {
  SHARDRT_CHECK(config_.accumulation_steps >= 1, ValueError, "optimizer: accumulation_steps ",
                config_.accumulation_steps, " must be >= 1");
  SHARDRT_CHECK(config_.max_grad_norm >= 0, ValueError, "optimizer: max_grad_norm ", config_.max_grad_norm,
                " must be >= 0 (0 turns clipping off)");
  check_adamw_options(config_.adamw);
  check_sgd_options(config_.sgd);
  check_muon_options(config_.muon);

  const models::NamedTensors named = module.named_parameters();
  SHARDRT_CHECK(!named.empty(), ValueError, "optimizer: the module has no parameters");
  // Groups by dtype (zero3: by block and dtype), in order of first appearance; each keeps named_parameters() order.
  const bool zero3 = config_.mode == ShardingMode::zero3;
  const std::vector<int> unit_of =
      zero3 ? zero3_assign_units(module, named) : std::vector<int>(named.size(), -1);
  std::vector<std::vector<size_t>> members;
  std::map<std::pair<int, DType>, size_t> group_of;
  device_ = named.front().second.device();
  for (size_t i = 0; i < named.size(); ++i) {
    const Tensor& p = named[i].second;
    SHARDRT_CHECK(p.device() == device_, DeviceError, "optimizer: parameter ", named[i].first, " is on ",
                  p.device().str(), " but ", named.front().first, " is on ", device_.str(),
                  "; one optimizer steps parameters of one device: move the whole model (Module::to)");
    auto [it, fresh] = group_of.emplace(std::make_pair(unit_of[i], p.dtype()), members.size());
    if (fresh) members.emplace_back();
    members[it->second].push_back(i);
  }

  if (device_.is_cuda()) device_setup();
  const std::vector<std::string> kinds = state_kinds(config_);
  std::vector<Tensor> bound(named.size());
  for (const std::vector<size_t>& idx : members) {
    Group g;
    g.dtype = named[idx.front()].second.dtype();
    g.unit = unit_of[idx.front()];
    g.master_dtype = low_precision(g.dtype) ? DType::f32 : g.dtype;
    std::vector<SlotRequest> requests;
    for (size_t i : idx) {
      const Tensor& p = named[i].second;
      const bool muon = config_.algorithm == Algorithm::muon_adamw && p.dim() == 2;
      requests.push_back({named[i].first, p.shape(), muon});
      g.muon.push_back(muon);
      num_parameters_ += p.numel();
    }
    g.layout = plan_layout(requests, plan_.shards);
    g.params = FlatArena(g.layout, g.dtype, device_);
    g.grads = FlatArena(g.layout, g.dtype, device_);
    std::vector<AutogradMeta*> leaves;
    {
      NoGradGuard no_grad;
      for (size_t k = 0; k < idx.size(); ++k) {
        const ArenaSlot& slot = g.layout.slots[k];
        Tensor view = g.params.view(slot);
        view.copy_(named[idx[k]].second);
        set_requires_grad(view);
        bind_grad(view, g.grads.view(slot));
        bound[idx[k]] = view;
        leaves.push_back(view.autograd_meta().get());
      }
    }
    leaves_.push_back(std::move(leaves));
    const int64_t begin = g.layout.shard_begin(plan_.own_shard), n = g.layout.shard_numel;
    // zero3: the master shard has storage of its own (the parameter arena is released between uses).
    if (g.master_dtype != g.dtype) g.master = g.params.range(begin, n).to(g.master_dtype);
    else g.master = zero3 ? g.params.range(begin, n).clone() : g.params.range(begin, n);
    for (const std::string& k : kinds) g.state.emplace_back(k, zeros({n}, {g.master_dtype, device_}));
    if (zero3 && g.unit >= 0) {
      g.zero3_grad = zeros({n}, {g.dtype});
      units_[static_cast<size_t>(g.unit)].groups.push_back(groups_.size());
    }
    groups_.push_back(std::move(g));
  }
  check_same_parameters_everywhere();
  module.bind_parameters(bound);
  if (zero3) zero3_install();
}

void Optimizer::check_same_parameters_everywhere() const {
  // Ranks with different parameter sets would pair collectives of different sizes in every step: refuse at
  // construction, on every rank, before the module is touched.
  if (mesh_.size() == 1) return;
  int64_t total = 0;
  for (const Group& g : groups_) total += g.layout.total() * 16 + static_cast<int64_t>(g.dtype);
  const Tensor t = from_vector({static_cast<double>(total), -static_cast<double>(total)}, {2}, {DType::i64});
  {
    auto scope = mesh_.flat().ledger().scope("optimizer.setup");
    mesh_.flat().all_reduce(t, ReduceOp::max);
  }
  const std::vector<double> got = t.to_vector();
  SHARDRT_CHECK(got[0] == static_cast<double>(total) && -got[1] == static_cast<double>(total), ValueError,
                "optimizer on ", mesh_.str(), ": the ranks hold different parameter sets (rank ", mesh_.rank(), ": ",
                num_parameters_, " parameters in ", groups_.size(),
                " dtype group(s)); build the same model with the same config on every rank");
}

double Optimizer::last_grad_norm() const {
  if (device_.is_cpu() || config_.max_grad_norm <= 0 || steps_ == 0) return last_norm_;
  return clip_slots_.narrow(0, 1, 1).item();
}

double Optimizer::current_lr_factor() const { return config_.schedule ? config_.schedule->factor(steps_) : 1.0; }

Tensor Optimizer::state_shard(size_t group, const std::string& name) const {
  for (const auto& [k, t] : groups_.at(group).state)
    if (k == name) return t;
  throw ValueError("optimizer: no state '" + name + "' for " + algorithm_name(config_.algorithm));
}

OptimizerMemory Optimizer::memory() const {
  OptimizerMemory m;
  m.num_parameters = num_parameters_;
  auto held = [](const FlatArena& a) { return a.buffer().storage()->resident() ? a.bytes() : int64_t{0}; };
  for (const Group& g : groups_) {
    m.params += held(g.params);
    m.grads += held(g.grads);
    if (g.zero3_grad.defined()) m.grads += static_cast<int64_t>(g.zero3_grad.nbytes());
    // zero3's master shard of an f32/f64 group is the parameter shard itself, with storage of its own.
    const bool own_shard = plan_.mode == ShardingMode::zero3 && g.master_dtype == g.dtype;
    if (own_shard) m.params += static_cast<int64_t>(g.master.nbytes());
    if (g.master_dtype != g.dtype) m.master += static_cast<int64_t>(g.master.nbytes());
    for (const auto& [k, t] : g.state) m.state += static_cast<int64_t>(t.nbytes());
  }
  return m;
}

void Optimizer::zero_grad() {
  if (plan_.mode == ShardingMode::zero3) zero3_finish_backward();
  zero3_sum_domain_ = false;
  for (Group& g : groups_) zero_group_grads(g);
  micro_ = 0;
  deferred_micros_ = 0;
}

void Optimizer::zero_group_grads(Group& g) {
  if (g.grads.buffer().storage()->resident()) g.grads.buffer().zero_();
  if (g.zero3_grad.defined()) g.zero3_grad.zero_();
  g.deferred_shard = Tensor();
}

void Optimizer::reduce_grads(Group& g, double scale) {
  auto scope = mesh_.flat().ledger().scope("reduce_grads");
  const Accumulate acc = low_precision(g.dtype) ? Accumulate::f32 : Accumulate::native;
  const Communicator* batch =
      plan_.batch_axis.empty() || plan_.batch_ranks == 1 ? nullptr : &mesh_.axis(plan_.batch_axis);
  const int64_t n = g.layout.shard_numel;
  // Deferred: reduce-scattered over ddp and summed over domain bucket by bucket during backward (grad_buckets.h).
  Tensor shard = g.deferred_shard;
  g.deferred_shard = Tensor();
  if (!shard.defined()) {
    switch (plan_.mode) {
      case ShardingMode::replicated:
        if (batch && !batch_summed_) batch->all_reduce(g.grads.buffer(), ReduceOp::sum, acc);
        shard = g.grads.buffer();
        break;
      case ShardingMode::ddp:
        if (batch) {
          shard = Tensor::empty({n}, g.dtype, device_);
          batch->reduce_scatter(g.grads.buffer(), shard, ReduceOp::sum, acc);
        } else {
          shard = g.grads.buffer();
        }
        break;
      case ShardingMode::mesh:
        if (batch) {
          // Segment q of the reduce_scatter is the shards of ddp group q's domain ranks; this rank keeps its own.
          Tensor segment = Tensor::empty({n * plan_.domain_ranks}, g.dtype, device_);
          batch->reduce_scatter(g.grads.buffer(), segment, ReduceOp::sum, acc);
          shard = segment.narrow(0, plan_.domain_index * n, n);
        } else {
          shard = g.grads.range(g.layout.shard_begin(plan_.own_shard), n);
        }
        break;
      case ShardingMode::zero3:
        if (g.unit >= 0) {
          shard = g.zero3_grad;  // reduce-scattered block by block during backward (zero3.cpp)
        } else if (batch) {
          shard = Tensor::empty({n}, g.dtype);
          batch->reduce_scatter(g.grads.buffer(), shard, ReduceOp::sum, acc);
        } else {
          shard = g.grads.buffer();
        }
        break;
    }
  }
  g.grad_shard = shard.dtype() == g.master_dtype ? shard : shard.to(g.master_dtype);
  scale_grad(g.grad_shard, scale);
}

double Optimizer::clip(std::vector<Group>& groups) {
  if (device_.is_cuda()) return clip_on_device(groups);
  auto scope = mesh_.flat().ledger().scope("clip");
  Tensor sq = zeros({1}, {DType::f64});
  double local = 0;
  for (const Group& g : groups) local += sum_of_squares(g.grad_shard);
  sq.fill_(local);
  const Communicator* over = nullptr;
  if ((plan_.mode == ShardingMode::ddp || plan_.mode == ShardingMode::zero3) && !plan_.batch_axis.empty() &&
      plan_.batch_ranks > 1)
    over = &mesh_.axis(plan_.batch_axis);
  if (plan_.mode == ShardingMode::mesh && mesh_.size() > 1) over = &mesh_.flat();
  if (over) over->all_reduce(sq);
  const double norm = std::sqrt(sq.item());
  const double coef = clip_coefficient(norm, config_.max_grad_norm);
  if (coef < 1)
    for (Group& g : groups) scale_in_place(g.grad_shard, coef);
  return norm;
}

namespace {
template <class T>
void update_slots(const std::vector<ArenaSlot>& slots, const std::vector<bool>& muon, int64_t begin, int64_t n,
                  T* p, const T* g, const std::vector<T*>& state, const OptimizerConfig& c, double factor,
                  int64_t step) {
  for (size_t i = 0; i < slots.size(); ++i) {
    const ArenaSlot& s = slots[i];
    const int64_t lo = std::max(s.offset, begin), hi = std::min(s.offset + s.numel, begin + n);
    if (lo >= hi) continue;
    const int64_t at = lo - begin, count = hi - lo;
    if (muon[i]) {
      // A whole slot lies inside one shard (arena.h), so an intersection is the entire matrix.
      muon_update<T>(p + at, g + at, state[2] + at, s.shape[0], s.shape[1], c.muon, c.muon.lr * factor);
    } else if (c.algorithm == Algorithm::sgd) {
      sgd_update<T>(p + at, g + at, state.empty() ? nullptr : state[0] + at, count, c.sgd, c.sgd.lr * factor, step);
    } else {
      adamw_update<T>(p + at, g + at, state[0] + at, state[1] + at, count, c.adamw, c.adamw.lr * factor, step);
    }
  }
}
}  // namespace

void Optimizer::update(Group& g, double factor) {
  if (device_.is_cuda()) return update_on_device(g, factor);
  const int64_t begin = g.layout.shard_begin(plan_.own_shard), n = g.layout.shard_numel;
  auto run = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    std::vector<T*> state;
    for (auto& [k, t] : g.state) state.push_back(t.template data<T>());
    update_slots<T>(g.layout.slots, g.muon, begin, n, g.master.template data<T>(), g.grad_shard.template data<T>(),
                    state, config_, factor, steps_);
  };
  if (g.master_dtype == DType::f64)
    run(static_cast<double*>(nullptr));
  else
    run(static_cast<float*>(nullptr));
}

void Optimizer::gather_params(Group& g) {
  auto scope = mesh_.flat().ledger().scope("gather_params");
  const bool copy = g.master_dtype != g.dtype;
  const Communicator* over = nullptr;
  if ((plan_.mode == ShardingMode::ddp || plan_.mode == ShardingMode::zero3) && plan_.shards > 1)
    over = &mesh_.axis(plan_.batch_axis);
  if (plan_.mode == ShardingMode::mesh && plan_.shards > 1) over = &mesh_.flat();
  if (plan_.mode == ShardingMode::zero3) {
    // A block is gathered by its next forward; the root unit now (its master shard has storage of its own).
    if (g.unit >= 0) return;
    const Tensor send = copy ? g.master.to(g.dtype) : g.master;
    if (over) over->all_gather(send, g.params.buffer());
    else g.params.buffer().copy_(send);
    return;
  }
  if (!over) {
    if (copy) g.params.buffer().copy_(g.master.to(g.dtype));
    return;
  }
  // The send buffer must not overlap the arena it gathers into.
  const Tensor send = copy ? g.master.to(g.dtype) : g.master.clone();
  over->all_gather(send, g.params.buffer());
}

std::shared_ptr<DeferredDomainSums> Optimizer::defer_domain_grad_sums() {
  SHARDRT_CHECK(device_.is_cpu(), DeviceError, "optimizer: deferred domain grad sums on ", device_.str(),
                " parameters are not supported yet; sum the grads in the patches (do not call "
                "defer_domain_grad_sums) or train on the CPU");
  SHARDRT_CHECK(deferral_.expired(), ValueError,
                "optimizer: defer_domain_grad_sums() while this micro-batch's deferred scope is still open; open one "
                "per micro-batch");
  const Communicator* domain = nullptr;
  for (int m = 0; m < mesh_.ndim(); ++m)
    if (!mesh_.is_batch_axis(m)) domain = &mesh_.axis(mesh_.axis_names()[m]);
  DeferredDomainSums::Reduction how;
  // In place: in `replicated` mode over the whole mesh, which makes each bucket's all_reduce the ddp sum as well
  // (step() then only scales); with one shard over the domain axis, and step()'s ddp step follows unchanged.
  how.in_place = plan_.mode == ShardingMode::replicated ? &mesh_.flat() : domain;
  // Into the shard, in every mode with sharded arenas: reduce-scatter over ddp first, then the domain sum of the
  // ~1/ddp piece each rank owns (shard_reduce.h); step() reduce-scatters nothing more.
  how.batch = plan_.batch_axis.empty() ? nullptr : &mesh_.axis(plan_.batch_axis);
  how.domain = domain;
  how.cut = ShardCut{0, plan_.batch_ranks, plan_.batch_index, plan_.domain_ranks, plan_.domain_index,
                     plan_.mode == ShardingMode::mesh};
  const bool into_shard = plan_.mode != ShardingMode::replicated && plan_.shards > 1;
  // Only the micro-batch that ends the accumulation window sums; the others leave their partial grads to add up.
  const bool last_micro = micro_ + 1 >= config_.accumulation_steps;
  std::vector<DeferredDomainSums::Group> groups;
  for (size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    if (g.unit >= 0) continue;  // a zero3 block: its reduce-scatter after its backward sums it (zero3.cpp)
    Tensor shard;
    if (into_shard && last_micro) shard = g.deferred_shard = zeros({g.layout.shard_numel}, {g.master_dtype});
    groups.push_back({&g.layout, g.grads.buffer(), leaves_[i], low_precision(g.dtype), shard});
  }
  auto d = std::make_shared<DeferredDomainSums>(how, std::move(groups), config_.bucket_bytes, last_micro);
  deferral_ = d;
  ++deferred_micros_;
  zero3_sum_domain_ = last_micro;
  return d;
}

bool Optimizer::step() {
  if (plan_.mode == ShardingMode::zero3) zero3_finish_backward();
  if (auto d = deferral_.lock()) d->finish();  // before the "optimizer" scope: its sums belong to the backward
  deferral_.reset();
  zero3_sum_domain_ = false;
  if (++micro_ < config_.accumulation_steps) return false;
  micro_ = 0;
  const int deferred = deferred_micros_;
  deferred_micros_ = 0;
  // Deferred buckets in `replicated` mode summed over the whole mesh: the batch sum is done (see reduce_grads).
  batch_summed_ = deferred > 0 && plan_.mode == ShardingMode::replicated;
  SHARDRT_CHECK(deferred == 0 || deferred == config_.accumulation_steps, ValueError, "optimizer: ", deferred, " of the ",
                config_.accumulation_steps,
                " micro-batches of this accumulation window deferred their domain grad sums and the others did not; "
                "their grads cannot be combined (partial and whole over the domain): defer all of them or none");
  auto scope = mesh_.flat().ledger().scope("optimizer");
  const double scale = 1.0 / (static_cast<double>(plan_.batch_ranks) * config_.accumulation_steps);
  for (Group& g : groups_) reduce_grads(g, scale);
  last_norm_ = config_.max_grad_norm > 0 ? clip(groups_) : 0;
  const double factor = current_lr_factor();
  ++steps_;
  for (Group& g : groups_) update(g, factor);
  for (Group& g : groups_) {
    gather_params(g);
    g.grad_shard = Tensor();
    zero_group_grads(g);
  }
  return true;
}

}  // namespace shardrt::optim
