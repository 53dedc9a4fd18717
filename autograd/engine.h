// Reverse-mode execution of the tape.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace shardrt {

// Runs backward from `roots` seeded with `grads` (one per root, same shape; undefined means ones, allowed only
// for single-element roots). Grads accumulate into every reachable leaf that requires grad. Unless
// `retain_graph`, each node frees its saved tensors after running, and a second backward through it throws
// AutogradError.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);
inline void backward(const Tensor& root, const Tensor& grad = Tensor(), bool retain_graph = false) {
  backward(std::vector<Tensor>{root}, std::vector<Tensor>{grad}, retain_graph);
}

// ---- the "before node" hook (used by ZeRO-3 to re-gather a block's parameters before the block's backward,
// optim/zero3.h; general: anything that must act when backward reaches a region of the recorded program) ----
// Called with a node's recording sequence number just before backward runs that node. backward() runs nodes in
// exactly the reverse of their recording order, so a caller that noted next_node_sequence_nr() around a region of
// the forward knows when backward enters the region (the first node it runs with a number inside) and when it has
// left it (the first node below). The hook may issue collectives (every rank runs the same program).
using BeforeNodeHook = std::function<void(uint64_t sequence_nr)>;
// Installs `hook` for every later backward on this process (an empty function clears it); returns the previous.
BeforeNodeHook set_before_node_hook(BeforeNodeHook hook);
// The sequence number the next node recorded on the tape will get.
uint64_t next_node_sequence_nr();

// ---- leaf-grad-ready hook -----------------------------------------------------------------------------------
// While one of these is alive, every backward() run on the thread that made it calls `on_ready(leaf)` once for each
// reachable leaf that requires grad, the moment that leaf's grad for this backward is final: every node that holds
// an edge to it has run and delivered (or declined to deliver) its contribution, so nothing still pending can add
// to it. Calls come on the backward thread, in the order the leaves become final; a leaf no node delivered a grad
// to still gets its call (its grad is whatever it held before). Leaves passed as roots are final once seeded unless
// a node also feeds them. Several live hooks are called in the order they were made. Why: an optimizer can start
// reducing a bucket of parameter grads while the rest of backward runs (optim/grad_buckets.h).
// RAII: the hook is removed when the object dies, so a hook made for one step cannot leak into the next.
class LeafGradReadyHook {
 public:
  using Callback = std::function<void(AutogradMeta& leaf)>;
  explicit LeafGradReadyHook(Callback on_ready);
  ~LeafGradReadyHook();
  LeafGradReadyHook(const LeafGradReadyHook&) = delete;
  LeafGradReadyHook& operator=(const LeafGradReadyHook&) = delete;

 private:
  Callback on_ready_;
};

// dst += src, in place, for same-shape floating tensors on one device (used for grad accumulation); bf16 / f16
// destinations are summed in f32 and rounded once.
void accumulate_into(const Tensor& dst, const Tensor& src);

}  // namespace shardrt
