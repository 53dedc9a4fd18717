// The optimizers' elementwise updates on a CUDA device, one fused pass over the flat arenas each.
// Contract: optim/adamw.h, optim/sgd.h and optim/muon.h (same formulas, operation order, step numbering and lr;
// their CPU loops are the oracle). CUDA: the master weights p, the grad g and the state are T in {float, double};
// `param_out`, when not null, receives the updated p rounded to `param_dtype` (f32, bf16 or f16) in the same pass,
// which is the model's low-precision copy written without a separate cast over the arena (any other dtype throws
// DTypeError). Muon's Newton–Schulz iterations run as cuBLAS GEMMs in T (f32 GEMMs never use TF32) on
// stream-ordered scratch. Device pointers on the device that owns `stream`; queued on `stream`, never
// synchronises.
#pragma once
#include <cstdint>

#include "runtime/cuda_context.h"
#include "runtime/dtype.h"

namespace shardrt::kernels::cuda {

// The model's copy of the parameters that an update writes besides the master weights (none when ptr is null).
struct ParamCopy {
  DType dtype = DType::f32;
  void* ptr = nullptr;
};

struct AdamWHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;  // 1-based
};

template <typename T>
void adamw_update(int64_t n, T* p, const T* g, T* m, T* v, const AdamWHyper& h, ParamCopy out, CudaStream stream);

struct SGDHyper {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  int64_t step = 1;
};

// `buf` may be null when momentum is 0.
template <typename T>
void sgd_update(int64_t n, T* p, const T* g, T* buf, const SGDHyper& h, ParamCopy out, CudaStream stream);

struct MuonHyper {
  double lr = 0;           // the scheduled rate (decoupled decay uses it)
  double step_size = 0;    // muon_adjusted_lr(lr, rows, cols, adjust)
  double momentum = 0.95, weight_decay = 0;
  bool nesterov = true;
  double a = 0, b = 0, c = 0, eps = 1e-7;  // Newton–Schulz coefficients and the normalisation floor
  int ns_steps = 5;
};

// One rows x cols matrix: momentum into buf, the orthogonalised direction by Newton–Schulz, then p.
template <typename T>
void muon_update(int64_t rows, int64_t cols, T* p, const T* g, T* buf, const MuonHyper& h, ParamCopy out,
                 CudaStream stream);

}  // namespace shardrt::kernels::cuda
