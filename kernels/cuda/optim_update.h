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

// ---- steps whose scalars live on the device (optim/captured_step.h) ------------------------------------------------
// A CUDA graph bakes every host scalar of a kernel launch into the graph, so a replayed step would reuse the
// captured learning rate and step count. These entry points read them from a DeviceStepScalars in device memory
// instead, which advance_step moves forward on the device, inside the step: replays then advance the schedule and
// the bias corrections exactly like eager steps (the eager CUDA optimizer uses the same kernels, so the two agree
// bit for bit).

// Lives in device memory; written only by advance_step. `step` is the 1-based count of the step being taken.
struct DeviceStepScalars {
  int64_t step = 0;
  int64_t overrun = 0;  // set once an advance ran past its table of schedule factors (the step used factor 0)
  double factor = 0;    // this step's schedule factor
  double adamw_lr = 0, adamw_decay = 1, adamw_step_size = 0, adamw_sqrt_bc2 = 1;
  double sgd_lr = 0;
  double muon_lr = 0;
};

// Base rates and AdamW's betas and decay, fixed for the optimizer's life (host scalars, so capturable).
struct StepRules {
  double adamw_lr = 0, beta1 = 0.9, beta2 = 0.999, adamw_weight_decay = 0;
  double sgd_lr = 0, muon_lr = 0;
};

// One thread: factor = factors[s->step - first_step] when `factors` is not null (a table of n_factors schedule
// factors, the schedule evaluated on the host ahead of time), else `host_factor`; then s->step += 1 and the rules'
// scalars for the new step: lr = base x factor, decay = 1 - lr wd, step_size = lr / (1 - beta1^t),
// sqrt_bc2 = sqrt(1 - beta2^t), in f64 as optim/adamw.cpp computes them.
void advance_step(DeviceStepScalars* s, const double* factors, int64_t n_factors, int64_t first_step,
                  double host_factor, const StepRules& rules, CudaStream stream);

// adamw_update / sgd_update with lr, step and the bias corrections read from `s` (h.lr and h.step are ignored).
template <typename T>
void adamw_update_scheduled(int64_t n, T* p, const T* g, T* m, T* v, const AdamWHyper& h,
                            const DeviceStepScalars* s, ParamCopy out, CudaStream stream);
template <typename T>
void sgd_update_scheduled(int64_t n, T* p, const T* g, T* buf, const SGDHyper& h, const DeviceStepScalars* s,
                          ParamCopy out, CudaStream stream);

// Clipping on the device. sum_squares_add: *acc += sum of x^2 in f64, in an order fixed by n alone (a fixed grid
// of partial sums, then one block), so reruns and graph replays agree bit for bit. `partials` is scratch of
// kSquarePartials doubles.
constexpr int kSquarePartials = 512;
template <typename T>
void sum_squares_add(int64_t n, const T* x, double* partials, double* acc, CudaStream stream);
// norm = sqrt(*sq); coef = min(1, max_norm / (norm + 1e-6)) (optim/clip.h), both written to the device.
void clip_coefficient(const double* sq, double max_norm, double* norm, double* coef, CudaStream stream);
// x[i] *= T(coef ? *coef : host_scale).
template <typename T>
void scale_by(int64_t n, T* x, const double* coef, double host_scale, CudaStream stream);

}  // namespace shardrt::kernels::cuda
