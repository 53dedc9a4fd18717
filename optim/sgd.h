// SGD with momentum, dampening, Nesterov and (coupled, L2) weight decay: PyTorch's torch.optim.SGD. For step t:
//   g   <- g + weight_decay * p
//   buf <- g                                   (t = 1)
//   buf <- momentum * buf + (1 - dampening) * g (t > 1)
//   g   <- nesterov ? g + momentum * buf : buf  (only when momentum != 0)
//   p   <- p - lr * g
// Elementwise, so any shard of the arenas runs it as is.
#pragma once
#include <cstdint>

namespace shardrt::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// `buf` may be null when momentum is 0 (no state).
template <class T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, const SGDOptions& o, double lr, int64_t step);

void check_sgd_options(const SGDOptions& o);

}  // namespace shardrt::optim
