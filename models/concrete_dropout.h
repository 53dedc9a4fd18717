// Concrete dropout's relaxed Bernoulli mask (Gal, Hron & Kendall 2017; physicsnemo/nn/module/concrete_dropout.py,
// models-spec §2.4) as a local op on the tape, in training mode, with the uniform draws u given:
//
//   forward   ℓ = log u - log(1 - u);  m = σ((ℓ + λ) / τ);  p = σ(λ);  D = 1 - p + ε;  y = x (1 - m) / D
//   backward  dx = dy (1 - m) / D
//             dλ = dy x [ -m (1 - m) / (τ D) + (1 - m) p (1 - p) / D² ]
//
// λ is p_logit given per element (the caller broadcasts the 0-d parameter to x's layout through the elementwise
// patch, whose backward sums dλ over the elements and over the mesh axes that shard x, once). u: data in
// [1e-7, 1 - 1e-7] (PhysicsNeMo clamps its torch.rand_like draw so), no grad. τ = 0.1 and ε = 1e-7 in PhysicsNeMo.
// x, λ and u share shape, float dtype and device (ShapeError / DTypeError naming the op otherwise). Computed in
// f64 on the host, returned in x's dtype on x's device.
#pragma once
#include "runtime/tensor.h"

namespace shardrt::models {

constexpr double kConcreteTemperature = 0.1, kConcreteEps = 1e-7;

Tensor concrete_dropout(const Tensor& x, const Tensor& p_logit, const Tensor& u,
                        double temperature = kConcreteTemperature, double eps = kConcreteEps);

}  // namespace shardrt::models
