// The zero3 mode's machinery (sharding.h, optimizer.h; design: docs/optimizer.md "ZeRO-3"): per block, the
// all-gather of its parameters before its forward (the next block's prefetched), their release after it, the
// re-gather before its backward (the block before it prefetched), and the async reduce-scatter of its grads once
// its backward is done.
//
// Where backward is. The engine runs tape nodes in exactly the reverse of their recording order and calls the
// before-node hook (autograd/engine.h) with each node's sequence number. A block's forward hooks note the range of
// sequence numbers its forward recorded, so the first node backward runs inside that range is the start of the
// block's backward, and the first node below it the end: the grads of its parameters are then complete (every
// use of a block's parameter is a node recorded inside the block's forward).
//
// Saved tensors. Autograd nodes keep the parameter tensors they saved. A block's parameters are views into its
// own arena, whose Storage is released after the forward and refilled before the backward (runtime/storage.h):
// the same Storage object, so every saved view stays valid and sees the re-gathered values.
//
// Memory. At most two blocks' parameters are gathered at once (the running one and the prefetched one), and at
// most two blocks' full grads are live (the running one and the one whose reduce-scatter is in flight: starting a
// block's reduce-scatter first completes the previous one). The last block keeps its parameters from its forward
// to its backward, which comes next (releasing and re-gathering them would only cost a gather).
//
// Order. Every rank runs the same program, so the hooks issue the same collectives in the same order everywhere
// (ranks of one ddp group differ only in their data).
//
// Deferred domain sums (Optimizer::defer_domain_grad_sums). The patches leave the blocks' grads partial over the
// domain axis too; each block's reduction is then a ShardReduce chain (optim/shard_reduce.h, the same code path
// as the deferred buckets of the root unit): the reduce-scatter over ddp adds into the block's grad shard, and in
// the backward that ends an accumulation window the shard is all_reduced over domain — 1/ddp of the block's grads
// — issued when the next block's backward ends (where the reduce-scatter is completed anyway) and waited for by
// step(). Earlier micro-batches' shards stay partial over domain and add up, so the sum happens once per window.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "autograd/engine.h"
#include "autograd/tape.h"
#include "optim/optimizer.h"
#include "runtime/errors.h"

namespace shardrt::optim {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A list entry registered on the model itself: "stages.3", "blocks.0" -> true; "preprocess.layers.0" (inside
// another module) and "head" -> false.
bool is_block_name(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos || dot + 1 == name.size() || name.find('.', dot + 1) != std::string::npos) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(dot + 1), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

bool inside(const std::string& name, const std::string& block) {
  return name.size() > block.size() && name.compare(0, block.size(), block) == 0 && name[block.size()] == '.';
}

// Live zero3 optimizers: the engine has one before-node hook, which calls each of them.
std::vector<Optimizer*>& live() {
  static std::vector<Optimizer*> v;
  return v;
}

}  // namespace

void zero3_dispatch_before_node(uint64_t seq) {
  for (Optimizer* o : live()) o->zero3_before_node(seq);
}

std::vector<int> Optimizer::zero3_assign_units(models::Module& module, const models::NamedTensors& named) {
  const models::NamedModules all = module.named_modules();
  std::vector<std::pair<std::string, models::Module*>> blocks;
  // The caller's list, else the model's own (Module::forward_blocks), else the list entries on the model itself.
  const std::vector<std::string> named_blocks =
      config_.zero3_blocks.empty() ? module.forward_blocks() : config_.zero3_blocks;
  if (named_blocks.empty()) {
    for (const auto& [name, m] : all)
      if (is_block_name(name)) blocks.emplace_back(name, m);
  } else {
    for (const std::string& want : named_blocks) {
      auto it = std::find_if(all.begin(), all.end(), [&](const auto& e) { return e.first == want; });
      SHARDRT_CHECK(it != all.end(), ValueError, "optimizer zero3: block '", want,
                    "' is not a module of the model; name modules as named_modules() does (e.g. 'stages.0')");
      blocks.emplace_back(it->first, it->second);
    }
  }
  std::vector<int> unit_of(named.size(), -1);
  for (size_t u = 0; u < blocks.size(); ++u) {
    Unit unit;
    unit.name = blocks[u].first;
    unit.module = blocks[u].second;
    units_.push_back(std::move(unit));
    for (size_t i = 0; i < named.size(); ++i)
      if (inside(named[i].first, blocks[u].first)) {
        SHARDRT_CHECK(unit_of[i] < 0, ValueError, "optimizer zero3: parameter ", named[i].first, " is in two blocks, '",
                      units_[static_cast<size_t>(unit_of[i])].name, "' and '", blocks[u].first,
                      "'; name blocks that do not nest");
        unit_of[i] = static_cast<int>(u);
      }
  }
  return unit_of;
}

void Optimizer::zero3_install() {
  // The blocks' full parameters and grads exist only while they are used; the master shard holds the values.
  for (Unit& u : units_)
    for (size_t gi : u.groups) {
      groups_[gi].params.buffer().storage()->release();
      groups_[gi].grads.buffer().storage()->release();
    }
  for (size_t u = 0; u < units_.size(); ++u)
    units_[u].module->set_forward_hooks({[this, u](const models::Module&) { zero3_before_forward(u); },
                                         [this, u](const models::Module&) { zero3_after_forward(u); }});
  if (live().empty()) set_before_node_hook(zero3_dispatch_before_node);
  live().push_back(this);
}

Optimizer::~Optimizer() {
  if (plan_.mode != ShardingMode::zero3) return;
  auto& l = live();
  l.erase(std::remove(l.begin(), l.end(), this), l.end());
  if (l.empty()) set_before_node_hook({});
  for (Unit& u : units_) u.module->set_forward_hooks({});
  // In-flight handles complete in their destructors (their buffers are the arenas, still alive here).
}

std::vector<std::string> Optimizer::zero3_block_names() const {
  std::vector<std::string> out;
  for (const Unit& u : units_) out.push_back(u.name);
  return out;
}

void Optimizer::zero3_start_gather(size_t u, const char* scope) {
  Unit& U = units_[u];
  if (U.gathering || U.gathered) return;
  auto s = mesh_.flat().ledger().scope(scope);
  const double t0 = now_s();
  const Communicator* over = plan_.shards > 1 ? &mesh_.axis(plan_.batch_axis) : nullptr;
  for (size_t gi : U.groups) {
    Group& g = groups_[gi];
    g.params.buffer().storage()->refill();
    const Tensor send = g.master_dtype != g.dtype ? g.master.to(g.dtype) : g.master;  // the handle keeps it alive
    if (over) U.gathers.push_back(over->all_gather_async(send, g.params.buffer()));
    else g.params.buffer().copy_(send);
  }
  zero3_stats_.gathers += over ? 1 : 0;
  zero3_stats_.issue_s += now_s() - t0;
  U.gathering = true;
}

void Optimizer::zero3_wait_gather(size_t u) {
  Unit& U = units_[u];
  if (!U.gathering) return;
  const double t0 = now_s();
  for (CommHandle& h : U.gathers) h.wait();
  zero3_stats_.gather_wait_s += now_s() - t0;
  U.gathers.clear();
  U.gathering = false;
  U.gathered = true;
}

void Optimizer::zero3_release_params(size_t u) {
  Unit& U = units_[u];
  zero3_wait_gather(u);  // an in-flight gather still writes the arena
  for (size_t gi : U.groups) groups_[gi].params.buffer().storage()->release();
  U.gathered = false;
}

void Optimizer::zero3_before_forward(size_t u) {
  zero3_start_gather(u, "zero3.gather_forward");  // nothing when prefetched (or kept)
  zero3_wait_gather(u);
  if (u + 1 < units_.size()) zero3_start_gather(u + 1, "zero3.gather_forward");  // overlaps this block's forward
  units_[u].seq_begin = next_node_sequence_nr();
}

void Optimizer::zero3_after_forward(size_t u) {
  Unit& U = units_[u];
  U.seq_end = next_node_sequence_nr();
  U.recorded = grad_mode_enabled() && U.seq_end > U.seq_begin;
  // The last block's backward comes first: it keeps its parameters (see the top of this file).
  const bool next_is_backward = U.recorded && u + 1 == units_.size();
  if (!next_is_backward) zero3_release_params(u);
}

void Optimizer::zero3_before_node(uint64_t seq) {
  // MPI advances a non-blocking collective only inside MPI calls: a test per node keeps the in-flight gathers and
  // reduce-scatters moving while backward computes (a few microseconds each).
  for (Unit& U : units_) {
    for (CommHandle& h : U.gathers) h.ready();
    for (ShardReduce& r : U.reduces) r.test();
  }
  if (backward_unit_ >= 0) {
    if (seq >= units_[static_cast<size_t>(backward_unit_)].seq_begin) return;  // still inside it
    zero3_end_backward(static_cast<size_t>(backward_unit_));
    backward_unit_ = -1;
  }
  for (size_t v = units_.size(); v-- > 0;) {
    const Unit& V = units_[v];
    if (V.recorded && seq >= V.seq_begin && seq < V.seq_end) {
      zero3_begin_backward(v);
      backward_unit_ = static_cast<int>(v);
      return;
    }
  }
}

void Optimizer::zero3_begin_backward(size_t u) {
  Unit& U = units_[u];
  zero3_start_gather(u, "zero3.gather_backward");  // nothing when prefetched or kept
  zero3_wait_gather(u);
  if (!U.grads_live) {
    for (size_t gi : U.groups) {
      const Tensor& buf = groups_[gi].grads.buffer();
      buf.storage()->refill();
      buf.zero_();
    }
    U.grads_live = true;
  }
  if (u > 0 && units_[u - 1].recorded) zero3_start_gather(u - 1, "zero3.gather_backward");
}

void Optimizer::zero3_end_backward(size_t u) {
  Unit& U = units_[u];
  U.recorded = false;
  zero3_release_params(u);
  // At most one reduce-scatter in flight besides this one: complete the older (it had a block's backward); its
  // domain sum, when deferred, goes out now — a point of the program every rank reaches alike (shard_reduce.h).
  for (size_t w = 0; w < units_.size(); ++w)
    if (units_[w].reducing) zero3_finish_reduce(w);
  if (!U.grads_live) return;
  for (ShardReduce& r : U.reduces) r.wait();  // a previous micro-batch's, if any were left
  U.reduces.clear();
  const double t0 = now_s();
  const Communicator* batch = plan_.shards > 1 ? &mesh_.axis(plan_.batch_axis) : nullptr;
  const Communicator* domain = nullptr;
  for (int m = 0; m < mesh_.ndim(); ++m)
    if (!mesh_.is_batch_axis(m)) domain = &mesh_.axis(mesh_.axis_names()[m]);
  U.reduces.reserve(U.groups.size());
  for (size_t gi : U.groups) {
    Group& g = groups_[gi];
    // The block's grads go into its persistent shard (summed over the micro-batches of an accumulation window);
    // partial over domain under deferred sums until the window's last backward sums the shard there, once.
    const ShardCut cut{g.layout.shard_numel, plan_.batch_ranks, plan_.batch_index, plan_.domain_ranks,
                       plan_.domain_index, false};
    U.reduces.emplace_back(cut, batch, domain, g.grads.buffer(), 0, g.zero3_grad, ShardReduce::Into::add,
                           zero3_sum_domain_, "zero3.reduce_grads");
    U.reduces.back().start();
  }
  zero3_stats_.reduce_scatters += batch ? 1 : 0;
  zero3_stats_.issue_s += now_s() - t0;
  U.reducing = true;
}

void Optimizer::zero3_finish_reduce(size_t u) {
  Unit& U = units_[u];
  if (!U.reducing) return;
  const double t0 = now_s();
  for (ShardReduce& r : U.reduces) r.advance();  // into zero3_grad; the deferred domain sum issued
  zero3_stats_.reduce_wait_s += now_s() - t0;
  for (size_t gi : U.groups) groups_[gi].grads.buffer().storage()->release();
  U.grads_live = false;
  U.reducing = false;
}

void Optimizer::zero3_finish_backward() {
  if (backward_unit_ >= 0) {
    zero3_end_backward(static_cast<size_t>(backward_unit_));
    backward_unit_ = -1;
  }
  for (size_t u = 0; u < units_.size(); ++u) zero3_finish_reduce(u);
  // A block whose backward never ran (unused, or a forward without backward) still gives its grads back, zero or
  // not, and its parameters.
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& U = units_[u];
    if (U.grads_live) {
      zero3_end_backward(u);
      zero3_finish_reduce(u);
    }
    if (U.gathering || U.gathered) zero3_release_params(u);
    U.recorded = false;
  }
  // The domain sums, in the order they were issued.
  for (Unit& U : units_) {
    for (ShardReduce& r : U.reduces) r.wait();
    U.reduces.clear();
  }
}

void Optimizer::summon_parameters() {
  if (plan_.mode != ShardingMode::zero3) return;
  zero3_finish_backward();
  for (size_t u = 0; u < units_.size(); ++u) zero3_start_gather(u, "zero3.summon");
  for (size_t u = 0; u < units_.size(); ++u) zero3_wait_gather(u);
}

}  // namespace shardrt::optim
