#include "autograd/engine.h"

#include <algorithm>
#include <atomic>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/function.h"
#include "autograd/ops/common.h"
#include "autograd/tape.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt {

namespace {
// Recording order of nodes, process-wide (see the ready queue in backward()).
std::atomic<uint64_t>& sequence_counter() {
  static std::atomic<uint64_t> counter{0};
  return counter;
}
uint64_t next_sequence_nr() { return sequence_counter().fetch_add(1); }

// ---- the before-node hook (engine.h) ----
BeforeNodeHook& before_node_hook() {
  static BeforeNodeHook hook;
  return hook;
}
}  // namespace

BeforeNodeHook set_before_node_hook(BeforeNodeHook hook) {
  BeforeNodeHook previous = std::move(before_node_hook());
  before_node_hook() = std::move(hook);
  return previous;
}

uint64_t next_node_sequence_nr() { return sequence_counter().load(); }

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_mode_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && requires_grad(t)) return true;
  return false;
}

std::vector<Tensor> attach_node(std::shared_ptr<Node> node, const char* name, const std::vector<Tensor>& inputs,
                                const std::vector<Tensor>& outputs) {
  node->name = name;
  node->sequence_nr = next_sequence_nr();
  node->inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e = t.defined() ? gradient_edge(t) : Edge{};
    if (t.defined()) e.shape = t.shape();
    node->inputs.push_back(std::move(e));
  }
  std::vector<Tensor> result;
  result.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor out = outputs[i].detach();  // a fresh tensor object: ctx copies never see this meta
    node->outputs.push_back({out.shape(), out.dtype(), out.device()});
    if (is_floating(out.dtype())) {
      auto meta = std::make_shared<AutogradMeta>();
      meta->requires_grad = true;
      meta->grad_fn = node;
      meta->output_nr = static_cast<int>(i);
      out.set_autograd_meta(std::move(meta));
    }
    result.push_back(std::move(out));
  }
  return result;
}

void accumulate_into(const Tensor& dst, const Tensor& src) {
  SHARDRT_CHECK(dst.shape() == src.shape(), ShapeError, "accumulate_into: ", dst.str(), " += ", src.str());
  check_same_device("accumulate_into", dst, src);
  if (dst.numel() == 0) return;
  if (dst.dtype() == DType::bf16 || dst.dtype() == DType::f16) {
    // Low-precision grads (mixed-precision parameters bound to an arena): add in f32, round once.
    Tensor wide = dst.to(DType::f32).contiguous().clone();
    accumulate_into(wide, src.to(DType::f32));
    dst.copy_(wide);
    return;
  }
  Tensor s = src.dtype() == dst.dtype() ? src.contiguous() : src.to(dst.dtype()).contiguous();
  // Accumulate through a contiguous buffer when dst is a strided view.
  Tensor d = dst.is_contiguous() ? dst : dst.clone();
  const int64_t n = d.numel();
  auto axpy = [&](auto tag) {
    using T = decltype(tag);
    ops_detail::on_device(
        d, [&] { kernels::cpu::axpy<T>(n, T(1), s.data<T>(), d.data<T>()); },
        [&](CudaStream stream) { kernels::cuda::axpy<T>(n, T(1), s.data<T>(), d.data<T>(), stream); });
  };
  if (d.dtype() == DType::f64)
    axpy(double{});
  else if (d.dtype() == DType::f32)
    axpy(float{});
  else
    throw DTypeError(detail::concat("accumulate_into: grads of dtype ", dtype_name(d.dtype()), " are not supported on ",
                                    d.device().is_cpu() ? "cpu" : "cuda", " (", d.str(), ")"));
  if (!d.is_same(dst)) dst.copy_(d);
}

namespace {

// Grad for one leaf: bound buffers add in place; otherwise the first grad is kept as is and later ones are
// summed out of place, so a grad that aliases another tensor is never written through.
void accumulate_leaf(AutogradMeta& leaf, const Tensor& g) {
  if (leaf.grad_bound) {
    accumulate_into(leaf.grad, g);
  } else if (!leaf.grad.defined()) {
    leaf.grad = g.detach();
  } else {
    Tensor sum = leaf.grad.clone();
    accumulate_into(sum, g);
    leaf.grad = sum;
  }
}

// A backward that returns a grad of the wrong shape is a bug in that op; say which op.
void check_grad_shape(const Node& node, size_t input, const Tensor& g, const Shape& want) {
  SHARDRT_CHECK(g.shape() == want, AutogradError, "backward of ", node.name, ": grad for input ", input, " is ",
                g.str(), " but the input has shape ", shape_str(want));
}

// Adds g to the grad waiting for output `output_nr` of `node` (out of place: g may alias another tensor).
using PendingGrads = std::unordered_map<Node*, std::vector<Tensor>>;
void add_pending(PendingGrads& pending, Node& node, int output_nr, const Tensor& g) {
  auto& slot = pending[&node];
  slot.resize(node.outputs.size());
  if (slot[output_nr].defined()) {
    Tensor sum = slot[output_nr].clone();
    accumulate_into(sum, g);
    slot[output_nr] = sum;
  } else {
    slot[output_nr] = g;
  }
}

}  // namespace

// ---- leaf-grad-ready hook -------------------------------------------------------------------------------------
namespace {
// The live hooks of this thread, in the order they were made.
thread_local std::vector<LeafGradReadyHook::Callback*> t_leaf_ready_hooks;

// Per backward: how many edges of not-yet-run nodes still point at each leaf; a leaf whose count reaches zero is
// final and is announced to the hooks. Empty (and free) when no hook is live.
class LeafReadiness {
 public:
  void begin() { active_ = !t_leaf_ready_hooks.empty(); }
  void expect_edge(const std::shared_ptr<AutogradMeta>& leaf) {
    if (active_) ++pending_[leaf.get()];
  }
  // A root leaf's seed: final now unless a node still feeds it (then its last edge announces it).
  void seeded_root(const std::shared_ptr<AutogradMeta>& leaf) {
    if (active_ && !pending_.count(leaf.get()) && announced_.insert(leaf.get()).second) announce(*leaf);
  }
  void edge_done(const std::shared_ptr<AutogradMeta>& leaf) {
    if (active_ && --pending_[leaf.get()] == 0) announce(*leaf);
  }

 private:
  static void announce(AutogradMeta& leaf) {
    // A copy: a callback may (though it should not) make or drop hooks.
    const std::vector<LeafGradReadyHook::Callback*> hooks = t_leaf_ready_hooks;
    for (LeafGradReadyHook::Callback* h : hooks) (*h)(leaf);
  }
  bool active_ = false;
  std::unordered_map<AutogradMeta*, int> pending_;
  std::unordered_set<AutogradMeta*> announced_;
};
}  // namespace

LeafGradReadyHook::LeafGradReadyHook(Callback on_ready) : on_ready_(std::move(on_ready)) {
  SHARDRT_CHECK(on_ready_, ValueError, "LeafGradReadyHook: the callback is empty");
  t_leaf_ready_hooks.push_back(&on_ready_);
}

LeafGradReadyHook::~LeafGradReadyHook() {
  auto& hooks = t_leaf_ready_hooks;
  hooks.erase(std::remove(hooks.begin(), hooks.end(), &on_ready_), hooks.end());
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  SHARDRT_CHECK(roots.size() == grads.size(), ValueError, "backward: ", roots.size(), " roots but ", grads.size(),
                " grads");
  NoGradGuard no_grad;  // backward functions compute plain tensors

  // Seed grads; roots that are leaves receive theirs directly.
  PendingGrads pending;
  std::vector<std::shared_ptr<Node>> starts;
  LeafReadiness readiness;
  readiness.begin();
  std::vector<std::shared_ptr<AutogradMeta>> root_leaves;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    SHARDRT_CHECK(requires_grad(r), AutogradError, "backward: root ", i, " (", r.str(),
                  ") does not require grad; nothing to differentiate");
    Tensor g = grads[i];
    if (!g.defined()) {
      SHARDRT_CHECK(r.numel() == 1, AutogradError, "backward: root ", r.str(),
                    " has more than one element; pass its grad explicitly");
      g = ones(r.shape(), {r.dtype(), r.device()});
    }
    SHARDRT_CHECK(g.shape() == r.shape(), ShapeError, "backward: grad ", g.str(), " for root ", r.str());
    Edge e = gradient_edge(r);
    if (e.leaf) {
      accumulate_leaf(*e.leaf, g);
      root_leaves.push_back(e.leaf);
      continue;
    }
    add_pending(pending, *e.node, e.output_nr, g);
    starts.push_back(e.node);
  }

  // Count, for every reachable node, how many edges feed grads into it.
  std::unordered_map<Node*, int> dependencies;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (auto& s : starts)
    if (seen.insert(s.get()).second) stack.push_back(s.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->inputs) {
      if (e.leaf) readiness.expect_edge(e.leaf);
      if (!e.node) continue;
      dependencies[e.node.get()] += 1;
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  for (const auto& leaf : root_leaves) readiness.seeded_root(leaf);

  // Run nodes whose consumers have all delivered their grads.
  // Among the nodes whose consumers are done, run the most recently recorded first. Every node's consumers were
  // recorded after it, so this runs the nodes in exactly the reverse of their recording order. That order is a
  // function of the forward program alone: ranks whose graphs differ in local-only nodes (an edge rank's extra
  // pad) still run the nodes with collectives in the same relative order, so their backward collectives match.
  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr < b->sequence_nr;
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later_first)> ready(
      later_first);
  {
    std::unordered_set<Node*> queued;
    for (auto& s : starts)
      if (dependencies[s.get()] == 0 && queued.insert(s.get()).second) ready.push(s);
  }
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> grad_out = std::move(pending[node.get()]);
    pending.erase(node.get());
    grad_out.resize(node->outputs.size());
    for (size_t k = 0; k < grad_out.size(); ++k)
      if (!grad_out[k].defined()) {
        const OutputInfo& o = node->outputs[k];
        grad_out[k] = zeros(o.shape, {o.dtype, o.device});
      }
    if (const BeforeNodeHook& hook = before_node_hook()) hook(node->sequence_nr);  // the before-node hook
    std::vector<Tensor> grad_in = node->apply(grad_out);
    if (!retain_graph) node->release();
    SHARDRT_CHECK(grad_in.size() == node->inputs.size(), AutogradError, "backward of ", node->name, " returned ",
                  grad_in.size(), " grads for ", node->inputs.size(), " inputs");
    for (size_t i = 0; i < grad_in.size(); ++i) {
      const Edge& e = node->inputs[i];
      if (!e.active()) continue;
      const Tensor& g = grad_in[i];
      if (e.leaf) {
        if (g.defined()) {
          check_grad_shape(*node, i, g, e.shape);
          accumulate_leaf(*e.leaf, g);
        }
        readiness.edge_done(e.leaf);
        continue;
      }
      Node* next = e.node.get();
      if (g.defined()) {
        check_grad_shape(*node, i, g, e.shape);
        add_pending(pending, *next, e.output_nr, g);
      }
      if (--dependencies[next] == 0) ready.push(e.node);
    }
  }
}

}  // namespace shardrt
