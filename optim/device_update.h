// The three update rules on Tensors of either device: the CPU loops of adamw.h, sgd.h and muon.h for CPU tensors,
// the fused kernels of kernels/cuda/optim_update.h for CUDA ones, picked by the tensors' device (no preprocessor).
// Every tensor is contiguous, of one device, and p, g and the state share p's dtype (f32 or f64, the master
// precision) and element count. `param_copy`, when defined, is a contiguous tensor of p's device and element count
// in any float dtype: it receives the updated p (the model's bf16/f16 weights), in the same pass on CUDA.
// Bad input throws DTypeError / ShapeError / DeviceError naming the rule and the tensors.
#pragma once
#include <cstdint>

#include "optim/adamw.h"
#include "optim/muon.h"
#include "optim/sgd.h"
#include "kernels/cuda/optim_update.h"
#include "runtime/tensor.h"

namespace shardrt::optim {

void adamw_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const AdamWOptions& o,
                  double lr, int64_t step, const Tensor& param_copy = Tensor());

// `buf` may be undefined when o.momentum is 0.
void sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const SGDOptions& o, double lr, int64_t step,
                const Tensor& param_copy = Tensor());

// p, g and buf hold one rows x cols matrix.
void muon_update(const Tensor& p, const Tensor& g, const Tensor& buf, int64_t rows, int64_t cols,
                 const MuonOptions& o, double lr, const Tensor& param_copy = Tensor());

// The fused Muon kernel's hyperparameters for one rows x cols matrix at learning rate `lr` (the scheduled rate),
// from the options; the eager update and the optimizer's device step share it.
kernels::cuda::MuonHyper muon_kernel_hyper(const MuonOptions& o, double lr, int64_t rows, int64_t cols);

}  // namespace shardrt::optim
