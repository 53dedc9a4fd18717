// The tape: autograd metadata carried by tensors, graph nodes, and grad mode.
//
// An op that runs while grad mode is on and sees an input that requires grad records a Node: the op's saved
// context plus its hand-written backward. The node remembers, for each differentiable input, where that
// input's grad must go (the node that produced it, or the leaf it is). backward() walks the nodes in reverse
// topological order; see engine.h.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace shardrt {

class Node;

// Where the grad of one op input goes: into output `output_nr` of `node`, or into a leaf's meta.
struct Edge {
  std::shared_ptr<Node> node;          // producer of the input (null for leaves and constants)
  int output_nr = 0;
  std::shared_ptr<AutogradMeta> leaf;  // set for leaves that require grad
  Shape shape;                         // the input's shape: its grad must have exactly this shape
  bool active() const { return node || leaf; }
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                    // accumulated grad of a leaf
  bool grad_bound = false;        // grad is a caller-owned buffer (e.g. a view into a flat arena): add in place
  std::shared_ptr<Node> grad_fn;  // the node that produced this tensor; null for leaves
  int output_nr = 0;              // which output of grad_fn this tensor is
};

// Metadata of one node output, enough to make a zero grad for an output nobody used.
struct OutputInfo {
  Shape shape;
  DType dtype;
  Device device;
};

class Node {
 public:
  virtual ~Node() = default;
  // Grads of the outputs in (undefined ones already replaced by zeros) -> grads of the inputs out, one per
  // entry of `inputs` (undefined where an input needs none).
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;
  // Frees what the op saved for backward (called after backward unless the graph is retained).
  virtual void release() = 0;

  std::string name;
  uint64_t sequence_nr = 0;  // recording order; backward runs nodes in reverse of it
  std::vector<Edge> inputs;
  std::vector<OutputInfo> outputs;
};

// ---- grad mode -------------------------------------------------------------------------------------------
bool grad_mode_enabled();
// Disables recording for its lifetime (backward functions run under one too).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// ---- per-tensor autograd API -----------------------------------------------------------------------------
// Marks a leaf as requiring grad (a tensor produced by a recorded op cannot be changed).
void set_requires_grad(Tensor& t, bool on = true);
bool requires_grad(const Tensor& t);
bool is_leaf(const Tensor& t);
// The accumulated grad of a leaf (undefined until a backward reaches it).
Tensor grad_of(const Tensor& t);
// Resets a leaf's grad: zeroes a bound buffer in place, drops an unbound grad.
void zero_grad(Tensor& t);
// Makes `buffer` (same shape/dtype/device, typically a view into a flat arena) the leaf's grad: backward then
// accumulates into it in place, and zero_grad zeroes it. The buffer's current contents are kept.
void bind_grad(Tensor& t, const Tensor& buffer);
// The edge through which a grad flows into `t` (inactive for constants).
Edge gradient_edge(const Tensor& t);

}  // namespace shardrt
