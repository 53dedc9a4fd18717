// Recording an op on the tape. Every local op is written as a plain pair
//
//   struct FooCtx { ... what backward needs ... };
//   Tensor foo_forward(FooCtx& ctx, inputs...);                          // computes, fills ctx
//   std::vector<Tensor> foo_backward(FooCtx& ctx, const std::vector<Tensor>& grad_outputs);  // one grad per input
//
// and the public function calls forward, then `record(...)`, which attaches a node to the outputs only when
// grad mode is on and some input requires grad (otherwise the ctx is simply dropped). The ctx holds plain
// tensors; the outputs handed to record() are returned as new tensors, so saving an output in ctx never makes
// a reference cycle.
#pragma once
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "runtime/errors.h"

namespace shardrt {

// True when an op on these inputs must be recorded.
bool any_requires_grad(const std::vector<Tensor>& inputs);

template <typename Ctx>
using BackwardFn = std::vector<Tensor> (*)(Ctx&, const std::vector<Tensor>&);

template <typename Ctx>
class OpNode final : public Node {
 public:
  OpNode(Ctx ctx, BackwardFn<Ctx> fn) : ctx_(std::move(ctx)), fn_(fn) {}
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    SHARDRT_CHECK(ctx_.has_value(), AutogradError, name,
                  ": backward through a graph whose saved tensors were already freed; pass retain_graph=true to the "
                  "first backward to run it twice");
    return fn_(*ctx_, grad_outputs);
  }
  void release() override { ctx_.reset(); }

 private:
  std::optional<Ctx> ctx_;
  BackwardFn<Ctx> fn_;
};

// Attaches `node` to fresh copies of `outputs` (input edges taken from `inputs`) and returns them.
std::vector<Tensor> attach_node(std::shared_ptr<Node> node, const char* name, const std::vector<Tensor>& inputs,
                                const std::vector<Tensor>& outputs);

template <typename Ctx>
std::vector<Tensor> record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor> outputs, Ctx&& ctx,
                           BackwardFn<std::decay_t<Ctx>> backward) {
  if (!any_requires_grad(inputs)) return outputs;
  auto node = std::make_shared<OpNode<std::decay_t<Ctx>>>(std::forward<Ctx>(ctx), backward);
  return attach_node(std::move(node), name, inputs, outputs);
}

// Records even when no input requires grad, as long as grad mode is on and `participate` is true. For ops with
// collectives in their backward: every rank must record the same node so every rank runs the backward's
// collectives, including a rank whose own inputs need no grad (e.g. scatter's non-source ranks). `participate`
// must be the same on every rank (e.g. agreed with a broadcast).
template <typename Ctx>
std::vector<Tensor> record_collective(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor> outputs,
                                      bool participate, Ctx&& ctx, BackwardFn<std::decay_t<Ctx>> backward) {
  if (!grad_mode_enabled() || !participate) return outputs;
  auto node = std::make_shared<OpNode<std::decay_t<Ctx>>>(std::forward<Ctx>(ctx), backward);
  return attach_node(std::move(node), name, inputs, outputs);
}

// Single-output convenience.
template <typename Ctx>
Tensor record(const char* name, const std::vector<Tensor>& inputs, Tensor output, Ctx&& ctx,
              BackwardFn<std::decay_t<Ctx>> backward) {
  return record(name, inputs, std::vector<Tensor>{std::move(output)}, std::forward<Ctx>(ctx), backward)[0];
}

}  // namespace shardrt
