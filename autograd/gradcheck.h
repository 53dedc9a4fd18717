// fp64 gradient check by central finite differences.
//
// The outputs are contracted with fixed random weights r (a random grad_output, never sum()), so
// L = sum_k <out_k, r_k>; the analytic grads come from one backward(outs, r), the numeric ones from
// (L(x + eps e_i) - L(x - eps e_i)) / 2 eps for every element i of every input that requires grad.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace shardrt {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-6;
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;  // over all checked elements
  double max_rel_error = 0;  // |analytic - numeric| / max(|numeric|, 1e-12)
  int checked_elements = 0;
  bool any_nonzero_grad = false;  // anti-vacuity: at least one grad element is nonzero
  std::string report;        // first mismatches, for the test log
};

using GradcheckFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// `inputs` are contiguous f64 CPU tensors; those marked requires_grad are checked (the others are constants).
// The function must be deterministic. Throws ValueError when an input is not f64/CPU/contiguous.
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions opt = {});

}  // namespace shardrt
