// Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_ with the 2-norm): the norm of all grads together,
// each shard's squared sum added by one all_reduce over the ranks that own disjoint shards, then every grad
// scaled by min(1, max_norm / (norm + 1e-6)).
#pragma once
#include "runtime/tensor.h"

namespace shardrt::optim {

// sum of x^2 over a contiguous floating tensor, in f64.
double sum_of_squares(const Tensor& x);
double clip_coefficient(double total_norm, double max_norm);

}  // namespace shardrt::optim

namespace shardrt::optim {
// x *= s in place (contiguous CPU f32 / f64).
void scale_in_place(const Tensor& x, double s);
}  // namespace shardrt::optim
