// Module: a node of a model's tree. Each owns named parameters and buffers and named child modules, registered in
// PhysicsNeMo's order, so iteration and state_dict keys are exactly PhysicsNeMo's (children nest with dotted names).
//
// A module registers pointers to its own Tensor members (llm.c style: the forward code reads plain members, the
// registry only names them), so loading a checkpoint, converting the dtype, or rebinding the parameters to views into
// an optimizer's flat arena replaces the member itself. Modules are therefore neither copyable nor movable; models
// live behind unique_ptr.
//
// Order (PyTorch's, which PhysicsNeMo inherits): state_dict lists a module's own parameters in registration order,
// then its own persistent buffers, then each child's entries recursively; named_parameters is the same walk with
// parameters only.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace shardrt::models {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
class Module;
using NamedModules = std::vector<std::pair<std::string, Module*>>;

// What load_state_dict did, beyond copying: one line per converted dtype group, and the keys it ignored when not
// strict.
struct LoadReport {
  std::vector<std::string> notes;
  std::vector<std::string> missing, unexpected;  // only when strict = false (strict throws instead)
};

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  NamedTensors state_dict() const;  // parameters and persistent buffers, PhysicsNeMo's keys and order
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;  // elements, as sum(p.numel() for p in model.parameters())

  // Copies `tensors` into the parameters and buffers, key for key. Strict: every missing key, every unexpected key
  // and every shape mismatch is listed in ONE ValueError (naming `what`, e.g. the file), nothing is changed.
  // Not strict: shape mismatches still throw; missing/unexpected keys are reported. A dtype other than the
  // module's is converted (a note says from what). Parameters keep requires_grad.
  LoadReport load_state_dict(const std::map<std::string, Tensor>& tensors, bool strict = true,
                             const std::string& what = "state dict");

  // Converts every parameter and buffer to `dtype` (parameters stay leaves that require grad).
  void to_dtype(DType dtype);

  // Moves every parameter and buffer to `device`, in place: the same slots and names, each a fresh leaf that
  // requires grad (parameters) holding the same values; grads are dropped (a bound or accumulated grad belongs to
  // the old storage — bind the moved parameters to an optimizer afterwards). A no-op for tensors already there.
  void to(Device device);

  // Rebinds each parameter, in named_parameters() order, to the given tensor (same shape and dtype): for example
  // views into an optimizer's flat arena, or the copies a parity harness hands in. Throws ValueError on a count,
  // shape or dtype mismatch.
  void bind_parameters(const std::vector<Tensor>& tensors);

  // Training mode, torch's module.train(on) / eval(): sets this module and every descendant. Models start in eval
  // mode (the identity for dropout), which is how shardrt-infer and the goldens run them; shardrt-train trains in
  // training mode. The one module that acts on it so far is GeoTransolver's ConcreteDropout.
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  // Every descendant module with its dotted name (the state_dict prefix of its entries), depth first in
  // registration order; this module itself not included.
  NamedModules named_modules() const;

  // ---- forward hooks ----
  // What a sharded optimizer needs to gather a block's parameters just before the block runs and free them after
  // (optim/zero3.h); general otherwise. A module whose forward supports hooks opens `auto scope = forward_scope();`
  // first thing: `before` runs then, `after` when the scope closes on a normal return (not while an exception
  // unwinds: a failed forward leaves whatever `before` set up). Hooks belong to this instance; {} clears them.
  // Modules that open the scope so far: the ViT's TransformerBlock, FLARE's FlareBlock, and GeoTransolver's
  // GaleBlock, GlobalContextBuilder and (from the model's forward) its preprocess Mlps.
  struct ForwardHooks {
    std::function<void(const Module&)> before, after;
  };
  void set_forward_hooks(ForwardHooks hooks) { hooks_ = std::move(hooks); }
  const ForwardHooks& forward_hooks() const { return hooks_; }

  class ForwardScope {
   public:
    explicit ForwardScope(const Module& m);
    ForwardScope(const ForwardScope&) = delete;
    ForwardScope& operator=(const ForwardScope&) = delete;
    ~ForwardScope() noexcept(false);

   private:
    const Module& module_;
    int unwinding_;
  };
  [[nodiscard]] ForwardScope forward_scope() const { return ForwardScope(*this); }

  // The descendants (named_modules() names) that each run once per forward inside their own forward_scope(), in
  // the order the forward runs them: the units a block-wise sharded optimizer gathers one at a time (zero3). Empty,
  // the default: the optimizer's own rule (list entries "<list>.<i>" registered on the model itself). A model
  // overrides it where that rule would miss a unit or take a module that opens no scope (GeoTransolver).
  virtual std::vector<std::string> forward_blocks() const { return {}; }

 protected:
  // `t` becomes a leaf that requires grad; `slot` must be a member of this module (it stays registered by address).
  void register_parameter(const std::string& name, Tensor* slot);
  void register_buffer(const std::string& name, Tensor* slot);
  void register_module(const std::string& name, Module* child);

 private:
  struct Slot {
    std::string name;
    Tensor* tensor;
  };
  struct Child {
    std::string name;
    Module* module;
  };
  void walk(const std::string& prefix, bool params, bool buffers, std::vector<std::pair<std::string, Tensor*>>& out) const;
  std::vector<std::pair<std::string, Tensor*>> slots(bool params, bool buffers) const;
  void check_new_name(const std::string& name) const;

  std::vector<Slot> params_, buffers_;
  std::vector<Child> children_;
  ForwardHooks hooks_;
  bool training_ = false;
};

}  // namespace shardrt::models
