#include "optim/device_update.h"

#include <initializer_list>

#include "kernels/cuda/optim_update.h"
#include "runtime/cuda_context.h"
#include "runtime/errors.h"

namespace shardrt::optim {
namespace {

// p's dtype is f32 or f64; every defined tensor is contiguous, on p's device, with p's element count, and all but
// the parameter copy have p's dtype.
void check_update_tensors(const char* rule, const Tensor& p, std::initializer_list<const Tensor*> same,
                          const Tensor& param_copy) {
  SHARDRT_CHECK(p.defined() && (p.dtype() == DType::f32 || p.dtype() == DType::f64), DTypeError, rule,
                ": master weights must be f32 or f64, got ", p.defined() ? p.str() : std::string("undefined"));
  for (const Tensor* t : same) {
    SHARDRT_CHECK(t->defined(), ValueError, rule, ": a grad or state tensor is undefined (weights ", p.str(), ")");
    SHARDRT_CHECK(t->dtype() == p.dtype(), DTypeError, rule, ": ", t->str(), " does not match the weights ",
                  p.str(), "; grads and state are kept in the master dtype");
  }
  for (const Tensor* t : same) {
    SHARDRT_CHECK(t->device() == p.device(), DeviceError, rule, ": ", t->str(), " is not on the weights' device (",
                  p.str(), ")");
    SHARDRT_CHECK(t->numel() == p.numel() && t->is_contiguous(), ShapeError, rule, ": ", t->str(),
                  " must be contiguous with the weights' ", p.numel(), " elements");
  }
  SHARDRT_CHECK(p.is_contiguous(), ShapeError, rule, ": the weights ", p.str(), " must be contiguous");
  if (param_copy.defined()) {
    SHARDRT_CHECK(param_copy.device() == p.device() && param_copy.numel() == p.numel() &&
                      param_copy.is_contiguous(),
                  ShapeError, rule, ": the parameter copy ", param_copy.str(),
                  " must be contiguous on the weights' device with their ", p.numel(), " elements (weights ",
                  p.str(), ")");
  }
}

kernels::cuda::ParamCopy copy_of(const Tensor& param_copy) {
  if (!param_copy.defined()) return {};
  return {param_copy.dtype(), param_copy.raw_data()};
}

// The CPU rules write only the master weights; the model's copy follows in one cast.
void refresh_copy(const Tensor& p, const Tensor& param_copy) {
  if (param_copy.defined()) param_copy.copy_(p.view(param_copy.shape()));
}

template <typename F>
void with_master_type(const Tensor& p, F&& f) {
  if (p.dtype() == DType::f64) f(double{});
  else f(float{});
}

}  // namespace

void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWOptions& o,
                  double lr, int64_t step, const Tensor& param_copy) {
  check_update_tensors("AdamW", p, {&g, &m, &v}, param_copy);
  with_master_type(p, [&](auto tag) {
    using T = decltype(tag);
    if (p.device().is_cpu()) {
      adamw_update<T>(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), p.numel(), o, lr, step);
      refresh_copy(p, param_copy);
    } else {
      const kernels::cuda::AdamWHyper h{lr, o.beta1, o.beta2, o.eps, o.weight_decay, step};
      kernels::cuda::adamw_update<T>(p.numel(), p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), h,
                                     copy_of(param_copy), current_stream(p.device().index));
    }
  });
}

void sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const SGDOptions& o, double lr, int64_t step,
                const Tensor& param_copy) {
  const bool with_state = o.momentum != 0;
  SHARDRT_CHECK(!with_state || buf.defined(), ValueError, "SGD: momentum ", o.momentum,
                " needs a momentum buffer for the weights ", p.str());
  if (with_state) check_update_tensors("SGD", p, {&g, &buf}, param_copy);
  else check_update_tensors("SGD", p, {&g}, param_copy);
  with_master_type(p, [&](auto tag) {
    using T = decltype(tag);
    T* state = with_state ? buf.data<T>() : nullptr;
    if (p.device().is_cpu()) {
      sgd_update<T>(p.data<T>(), g.data<T>(), state, p.numel(), o, lr, step);
      refresh_copy(p, param_copy);
    } else {
      const kernels::cuda::SGDHyper h{lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, step};
      kernels::cuda::sgd_update<T>(p.numel(), p.data<T>(), g.data<T>(), state, h, copy_of(param_copy),
                                   current_stream(p.device().index));
    }
  });
}

void muon_update(const Tensor& p, const Tensor& g, const Tensor& buf, int64_t rows, int64_t cols,
                 const MuonOptions& o, double lr, const Tensor& param_copy) {
  check_update_tensors("Muon", p, {&g, &buf}, param_copy);
  SHARDRT_CHECK(rows >= 0 && cols >= 0 && rows * cols == p.numel(), ShapeError, "Muon: a ", rows, " x ", cols,
                " matrix does not match the weights ", p.str());
  with_master_type(p, [&](auto tag) {
    using T = decltype(tag);
    if (p.device().is_cpu()) {
      muon_update<T>(p.data<T>(), g.data<T>(), buf.data<T>(), rows, cols, o, lr);
      refresh_copy(p, param_copy);
    } else {
      const kernels::cuda::MuonHyper h = muon_kernel_hyper(o, lr, rows, cols);
      kernels::cuda::muon_update<T>(rows, cols, p.data<T>(), g.data<T>(), buf.data<T>(), h, copy_of(param_copy),
                                    current_stream(p.device().index));
    }
  });
}

kernels::cuda::MuonHyper muon_kernel_hyper(const MuonOptions& o, double lr, int64_t rows, int64_t cols) {
  kernels::cuda::MuonHyper h;
  h.lr = lr;
  h.step_size = muon_adjusted_lr(lr, rows, cols, o.adjust);
  h.momentum = o.momentum;
  h.weight_decay = o.weight_decay;
  h.nesterov = o.nesterov;
  h.a = o.a;
  h.b = o.b;
  h.c = o.c;
  h.eps = o.eps;
  h.ns_steps = o.ns_steps;
  return h;
}

}  // namespace shardrt::optim
