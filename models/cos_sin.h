// The cos/sin features of PhysicsNeMo's PositionalEmbedding(embed_fn="cos_sin") as a local op on the tape, so that
// the grad reaches `time` (PyTorch's autograd gives it; physics losses differentiate with respect to time):
//
//   forward   a[b, k] = t[b] f[k];  y[b, k] = cos a,  y[b, K + k] = sin a                (t (B,), f (K,), y (B, 2K))
//   backward  r[b, k] = -sin a · dy[b, k] + cos a · dy[b, K + k];  dt[b] = Σ_k f[k] r[b, k];  df[k] = Σ_b t[b] r[b, k]
//
// Computed in f64 on the host (B·K values: one per sample and frequency) and returned in t's dtype, on t's device.
// t and f must share a float dtype (DTypeError naming the op otherwise) and be 1-D (ShapeError).
#pragma once
#include "runtime/tensor.h"

namespace shardrt::models {

Tensor cos_sin_embedding(const Tensor& t, const Tensor& freqs);

}  // namespace shardrt::models
