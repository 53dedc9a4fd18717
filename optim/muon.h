// Muon for 2-D weights (PyTorch's torch.optim.Muon, which PhysicsNeMo's Darcy recipe uses for its matrices with
// AdamW for everything else). For a (rows x cols) parameter:
//   buf <- momentum * buf + (1 - momentum) * g                 (torch's buf.lerp_(g, 1 - momentum))
//   u   <- nesterov ? g + momentum * (buf - g) : buf           (g.lerp(buf, momentum))
//   O   <- NS(u): X = u (transposed when rows > cols), X /= max(||X||_F, eps), then ns_steps times
//          A = X X^T;  X <- a X + (b A + c A A) X;  transposed back
//   p   <- p * (1 - lr * weight_decay) - adjusted_lr * O
// with (a, b, c) = (3.4445, -4.7750, 2.0315), 5 steps, eps 1e-7 (torch's defaults), and adjusted_lr =
// lr * sqrt(max(1, rows / cols)) ("original") or lr * 0.2 * sqrt(max(rows, cols)) ("match_rms_adamw", the recipe's).
// One difference from torch, on purpose: torch runs NS in bf16; here it runs in f64, so that an f64 run is an exact
// oracle and an f32 run loses nothing to it (the recipe's bf16 rounding is a property of that GPU path, not of
// the method).
//
// The update needs the whole matrix, so the arenas give each Muon matrix to one owning rank (arena.h, `whole`).
#pragma once
#include <cstdint>
#include <string>

namespace shardrt::optim {

enum class MuonLrAdjust { original, match_rms_adamw };

struct MuonOptions {
  double lr = 1e-3;
  double weight_decay = 0.1;
  double momentum = 0.95;
  bool nesterov = true;
  double a = 3.4445, b = -4.7750, c = 2.0315;
  double eps = 1e-7;
  int ns_steps = 5;
  MuonLrAdjust adjust = MuonLrAdjust::original;
};

// The Newton-Schulz orthogonalisation of a row-major rows x cols matrix, in place, in f64.
void newton_schulz(double* x, int64_t rows, int64_t cols, const MuonOptions& o);

template <class T>
void muon_update(T* p, const T* g, T* buf, int64_t rows, int64_t cols, const MuonOptions& o, double lr);

double muon_adjusted_lr(double lr, int64_t rows, int64_t cols, MuonLrAdjust adjust);
MuonLrAdjust parse_muon_lr_adjust(const std::string& name);  // "original", "match_rms_adamw"
void check_muon_options(const MuonOptions& o);

}  // namespace shardrt::optim
