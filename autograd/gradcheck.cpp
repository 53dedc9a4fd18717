#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "autograd/tape.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt {

namespace {

double contract(const std::vector<Tensor>& outs, const std::vector<Tensor>& weights) {
  double total = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!is_floating(outs[k].dtype())) continue;
    auto o = outs[k].to_vector();
    auto w = weights[k].to_vector();
    for (size_t i = 0; i < o.size(); ++i) total += o[i] * w[i];
  }
  return total;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs_in, GradcheckOptions opt) {
  std::vector<Tensor> inputs = inputs_in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) continue;
    SHARDRT_CHECK(!requires_grad(t) || (t.dtype() == DType::f64 && t.device().is_cpu() && t.is_contiguous()),
                  ValueError, "gradcheck: input ", i, " is ", t.str(), "; inputs that require grad must be contiguous f64 on cpu");
    if (requires_grad(t)) zero_grad(inputs[i]);
  }

  // Analytic grads from one backward with random output weights.
  std::vector<Tensor> outs = fn(inputs);
  Generator gen(opt.seed);
  std::vector<Tensor> weights, roots;
  for (const Tensor& o : outs) {
    Tensor w = randn(o.shape(), {DType::f64, Device::cpu()}, &gen);
    weights.push_back(w);
    if (requires_grad(o)) {
      roots.push_back(o);
    }
  }
  std::vector<Tensor> root_grads;
  for (size_t k = 0; k < outs.size(); ++k)
    if (requires_grad(outs[k])) root_grads.push_back(weights[k].to(outs[k].dtype()));
  SHARDRT_CHECK(!roots.empty(), ValueError, "gradcheck: no output requires grad");
  backward(roots, root_grads);

  GradcheckResult res;
  std::ostringstream report;
  int reported = 0;
  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& x = inputs[i];
    if (!x.defined() || !requires_grad(x)) continue;
    Tensor g = grad_of(x);
    std::vector<double> analytic = g.defined() ? g.to_vector() : std::vector<double>(x.numel(), 0.0);
    double* p = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      double saved = p[j];
      p[j] = saved + opt.eps;
      double lp = contract(fn(inputs), weights);
      p[j] = saved - opt.eps;
      double lm = contract(fn(inputs), weights);
      p[j] = saved;
      double numeric = (lp - lm) / (2 * opt.eps);
      double err = std::abs(analytic[j] - numeric);
      double rel = err / std::max(std::abs(numeric), 1e-12);
      res.max_abs_error = std::max(res.max_abs_error, err);
      if (err > opt.atol) res.max_rel_error = std::max(res.max_rel_error, rel);
      if (analytic[j] != 0.0) res.any_nonzero_grad = true;
      ++res.checked_elements;
      if (err > opt.atol + opt.rtol * std::abs(numeric)) {
        res.ok = false;
        if (reported++ < 8)
          report << "input " << i << " element " << j << ": analytic " << analytic[j] << " numeric " << numeric << "\n";
      }
    }
  }
  report << "gradcheck: " << res.checked_elements << " elements, max abs error " << res.max_abs_error
         << ", max rel error " << res.max_rel_error << (res.ok ? " (ok)" : " (FAILED)");
  res.report = report.str();
  return res;
}

}  // namespace shardrt
