#include "models/module.h"

#include <algorithm>
#include <exception>
#include <set>
#include <sstream>

#include "autograd/tape.h"
#include "runtime/errors.h"

namespace shardrt::models {

void Module::check_new_name(const std::string& name) const {
  SHARDRT_CHECK(!name.empty(), ValueError, "Module: an empty parameter, buffer or child name");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.name == name; });
  };
  SHARDRT_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), ValueError, "Module: the name '", name,
                "' is registered twice");
}

void Module::register_parameter(const std::string& name, Tensor* slot) {
  check_new_name(name);
  SHARDRT_CHECK(slot && slot->defined(), ValueError, "Module: parameter '", name, "' is undefined");
  set_requires_grad(*slot);
  params_.push_back({name, slot});
}

void Module::register_buffer(const std::string& name, Tensor* slot) {
  check_new_name(name);
  SHARDRT_CHECK(slot && slot->defined(), ValueError, "Module: buffer '", name, "' is undefined");
  buffers_.push_back({name, slot});
}

void Module::register_module(const std::string& name, Module* child) {
  check_new_name(name);
  SHARDRT_CHECK(child != nullptr && child != this, ValueError, "Module: child '", name, "' is invalid");
  children_.push_back({name, child});
}

void Module::walk(const std::string& prefix, bool params, bool buffers,
                  std::vector<std::pair<std::string, Tensor*>>& out) const {
  if (params)
    for (const Slot& s : params_) out.emplace_back(prefix + s.name, s.tensor);
  if (buffers)
    for (const Slot& s : buffers_) out.emplace_back(prefix + s.name, s.tensor);
  for (const Child& c : children_) c.module->walk(prefix + c.name + ".", params, buffers, out);
}

std::vector<std::pair<std::string, Tensor*>> Module::slots(bool params, bool buffers) const {
  std::vector<std::pair<std::string, Tensor*>> out;
  walk("", params, buffers, out);
  return out;
}

namespace {
NamedTensors values(const std::vector<std::pair<std::string, Tensor*>>& slots) {
  NamedTensors out;
  out.reserve(slots.size());
  for (const auto& [name, t] : slots) out.emplace_back(name, *t);
  return out;
}
}  // namespace

void Module::train(bool on) {
  training_ = on;
  for (const Child& c : children_) c.module->train(on);
}

NamedTensors Module::named_parameters() const { return values(slots(true, false)); }
NamedTensors Module::named_buffers() const { return values(slots(false, true)); }
// PyTorch's state_dict interleaves per module (own params, own buffers, then children), which walk() does.
NamedTensors Module::state_dict() const { return values(slots(true, true)); }

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (const auto& [name, t] : slots(true, false)) out.push_back(*t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, t] : slots(true, false)) n += t->numel();
  return n;
}

LoadReport Module::load_state_dict(const std::map<std::string, Tensor>& tensors, bool strict,
                                   const std::string& what) {
  const auto own = slots(true, true);
  LoadReport report;
  std::vector<std::string> mismatched;
  std::set<std::string> known;
  for (const auto& [name, slot] : own) {
    known.insert(name);
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      report.missing.push_back(name);
      continue;
    }
    if (it->second.shape() != slot->shape())
      mismatched.push_back(name + " (file " + shape_str(it->second.shape()) + ", model " + shape_str(slot->shape()) +
                           ")");
  }
  for (const auto& [name, t] : tensors)
    if (!known.count(name)) report.unexpected.push_back(name);

  auto list = [](const std::vector<std::string>& v) {
    std::ostringstream os;
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    return os.str();
  };
  const bool keys_bad = strict && (!report.missing.empty() || !report.unexpected.empty());
  if (keys_bad || !mismatched.empty()) {
    std::ostringstream os;
    os << "load_state_dict from " << what << ": it does not fit the model (" << own.size() << " entries)";
    if (strict && !report.missing.empty()) os << "; missing " << report.missing.size() << ": " << list(report.missing);
    if (strict && !report.unexpected.empty())
      os << "; unexpected " << report.unexpected.size() << ": " << list(report.unexpected);
    if (!mismatched.empty()) os << "; shape mismatch " << mismatched.size() << ": " << list(mismatched);
    os << ". Check that the config matches the one the checkpoint was trained with";
    throw ValueError(os.str());
  }

  std::map<std::string, int> converted;  // "f32 -> f64" -> count
  NoGradGuard no_grad;
  for (const auto& [name, slot] : own) {
    auto it = tensors.find(name);
    if (it == tensors.end()) continue;
    const Tensor& src = it->second;
    if (src.dtype() != slot->dtype())
      ++converted[std::string(dtype_name(src.dtype())) + " -> " + dtype_name(slot->dtype())];
    slot->copy_(src.to(slot->dtype()).to(slot->device()));
  }
  for (const auto& [how, n] : converted)
    report.notes.push_back("load_state_dict from " + what + ": converted " + std::to_string(n) + " tensor(s) " + how);
  return report;
}

void Module::to_dtype(DType dtype) {
  for (const auto& [name, slot] : slots(true, false)) {
    if (slot->dtype() == dtype) continue;
    Tensor t = slot->to(dtype).clone();
    set_requires_grad(t);
    *slot = t;
  }
  for (const auto& [name, slot] : slots(false, true))
    if (slot->dtype() == dtype || !is_floating(slot->dtype())) continue;
    else *slot = slot->to(dtype).clone();
}

void Module::to(Device device) {
  for (const auto& [name, slot] : slots(true, false)) {
    if (slot->device() == device) continue;
    Tensor t = slot->to(device);
    set_requires_grad(t);
    *slot = t;
  }
  for (const auto& [name, slot] : slots(false, true))
    if (slot->device() != device) *slot = slot->to(device);
}

void Module::bind_parameters(const std::vector<Tensor>& tensors) {
  const auto own = slots(true, false);
  SHARDRT_CHECK(tensors.size() == own.size(), ValueError, "bind_parameters: ", tensors.size(),
                " tensors for a model of ", own.size(), " parameters");
  for (size_t i = 0; i < own.size(); ++i) {
    const Tensor& t = tensors[i];
    Tensor* slot = own[i].second;
    SHARDRT_CHECK(t.defined() && t.shape() == slot->shape() && t.dtype() == slot->dtype(), ValueError,
                  "bind_parameters: ", own[i].first, " is ", dtype_name(slot->dtype()), " ", shape_str(slot->shape()),
                  ", given ", t.defined() ? std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape()) : "undefined");
  }
  for (size_t i = 0; i < own.size(); ++i) *own[i].second = tensors[i];
}

NamedModules Module::named_modules() const {
  NamedModules out;
  for (const Child& c : children_) {
    out.emplace_back(c.name, c.module);
    for (auto& [name, m] : c.module->named_modules()) out.emplace_back(c.name + "." + name, m);
  }
  return out;
}

// ---- forward hooks ----
Module::ForwardScope::ForwardScope(const Module& m) : module_(m), unwinding_(std::uncaught_exceptions()) {
  if (module_.hooks_.before) module_.hooks_.before(module_);
}

// May throw (a hook's collective failing under the throw_error policy) — but never while an exception unwinds.
Module::ForwardScope::~ForwardScope() noexcept(false) {
  if (std::uncaught_exceptions() > unwinding_) return;
  if (module_.hooks_.after) module_.hooks_.after(module_);
}

}  // namespace shardrt::models
