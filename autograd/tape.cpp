#include "autograd/tape.h"

#include "runtime/errors.h"

namespace shardrt {

namespace {
thread_local bool g_grad_enabled = true;

AutogradMeta& ensure_meta(Tensor& t) {
  if (!t.autograd_meta()) t.set_autograd_meta(std::make_shared<AutogradMeta>());
  return *t.autograd_meta();
}
}  // namespace

bool grad_mode_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

void set_requires_grad(Tensor& t, bool on) {
  check_defined("set_requires_grad", t, "tensor");
  SHARDRT_CHECK(!t.autograd_meta() || !t.autograd_meta()->grad_fn, AutogradError,
                "set_requires_grad: ", t.str(), " was produced by a recorded op; only leaves can be changed");
  SHARDRT_CHECK(!on || is_floating(t.dtype()), DTypeError, "set_requires_grad: ", t.str(),
                " is not floating point and cannot require grad");
  ensure_meta(t).requires_grad = on;
}

bool requires_grad(const Tensor& t) { return t.autograd_meta() && t.autograd_meta()->requires_grad; }
bool is_leaf(const Tensor& t) { return !t.autograd_meta() || !t.autograd_meta()->grad_fn; }

Tensor grad_of(const Tensor& t) { return t.autograd_meta() ? t.autograd_meta()->grad : Tensor(); }

void zero_grad(Tensor& t) {
  if (!t.autograd_meta()) return;
  AutogradMeta& m = *t.autograd_meta();
  if (m.grad_bound)
    m.grad.zero_();
  else
    m.grad = Tensor();
}

void bind_grad(Tensor& t, const Tensor& buffer) {
  SHARDRT_CHECK(requires_grad(t) && is_leaf(t), AutogradError, "bind_grad: ", t.str(),
                " must be a leaf that requires grad");
  SHARDRT_CHECK(buffer.shape() == t.shape() && buffer.dtype() == t.dtype() && buffer.device() == t.device(),
                AutogradError, "bind_grad: buffer ", buffer.str(), " does not match parameter ", t.str());
  AutogradMeta& m = *t.autograd_meta();
  m.grad = buffer.detach();
  m.grad_bound = true;
}

Edge gradient_edge(const Tensor& t) {
  const auto& m = t.autograd_meta();
  if (!m) return {};
  if (m->grad_fn) return Edge{m->grad_fn, m->output_nr, nullptr, {}};
  if (m->requires_grad) return Edge{nullptr, 0, m, {}};
  return {};
}

}  // namespace shardrt
