// AdamW (PyTorch's torch.optim.AdamW semantics, amsgrad off): decoupled weight decay, then Adam with bias
// correction. For step t (1-based), elementwise:
//   p   <- p * (1 - lr * weight_decay)
//   m   <- beta1 * m + (1 - beta1) * g
//   v   <- beta2 * v + (1 - beta2) * g^2
//   p   <- p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// It touches only the elements it is given, so it runs unchanged on any shard of the arenas.
#pragma once
#include <cstdint>

namespace shardrt::optim {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// n elements of parameter p, grad g, first moment m and second moment v; `lr` is the scheduled rate.
template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamWOptions& o, double lr, int64_t step);

void check_adamw_options(const AdamWOptions& o);  // ValueError naming the bad hyperparameter

}  // namespace shardrt::optim
