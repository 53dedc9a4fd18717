#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "runtime/errors.h"

namespace shardrt::optim {

void check_muon_options(const MuonOptions& o) {
  SHARDRT_CHECK(o.lr >= 0, ValueError, "Muon: lr ", o.lr, " must be >= 0");
  SHARDRT_CHECK(o.momentum >= 0, ValueError, "Muon: momentum ", o.momentum, " must be >= 0");
  SHARDRT_CHECK(o.weight_decay >= 0, ValueError, "Muon: weight_decay ", o.weight_decay, " must be >= 0");
  SHARDRT_CHECK(o.ns_steps >= 0 && o.ns_steps < 100, ValueError, "Muon: ns_steps ", o.ns_steps,
                " must lie in [0, 100)");
}

MuonLrAdjust parse_muon_lr_adjust(const std::string& name) {
  if (name == "original") return MuonLrAdjust::original;
  if (name == "match_rms_adamw") return MuonLrAdjust::match_rms_adamw;
  throw ValueError("Muon: adjust_lr_fn '" + name + "' is unknown; use 'original' or 'match_rms_adamw'");
}

double muon_adjusted_lr(double lr, int64_t rows, int64_t cols, MuonLrAdjust adjust) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  if (adjust == MuonLrAdjust::match_rms_adamw) return lr * 0.2 * std::sqrt(std::max(r, c));
  return lr * std::sqrt(std::max(1.0, r / c));
}

void newton_schulz(double* x, int64_t rows, int64_t cols, const MuonOptions& o) {
  // Work on the wide orientation (m <= n), so the Gram matrix is the small m x m one.
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  std::vector<double> X(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) X[tall ? j * n + i : i * n + j] = x[i * cols + j];
  double norm = 0;
  for (double v : X) norm += v * v;
  norm = std::max(std::sqrt(norm), o.eps);
  for (double& v : X) v /= norm;
  std::vector<double> A(static_cast<size_t>(m * m)), B(static_cast<size_t>(m * m)), Y(X.size());
  using kernels::cpu::gemm;
  for (int s = 0; s < o.ns_steps; ++s) {
    gemm<double>(false, true, m, m, n, 1.0, X.data(), n, X.data(), n, 0.0, A.data(), m);  // A = X X^T
    B = A;
    gemm<double>(false, false, m, m, m, o.c, A.data(), m, A.data(), m, o.b, B.data(), m);  // B = b A + c A A
    Y = X;
    gemm<double>(false, false, m, n, m, 1.0, B.data(), m, X.data(), n, o.a, Y.data(), n);  // Y = a X + B X
    X.swap(Y);
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = X[tall ? j * n + i : i * n + j];
}

template <class T>
void muon_update(T* p, const T* g, T* buf, int64_t rows, int64_t cols, const MuonOptions& o, double lr) {
  const int64_t n = rows * cols;
  const T mu = static_cast<T>(o.momentum);
  std::vector<double> u(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    buf[i] = buf[i] + (T(1) - mu) * (g[i] - buf[i]);
    u[i] = o.nesterov ? static_cast<double>(g[i] + mu * (buf[i] - g[i])) : static_cast<double>(buf[i]);
  }
  newton_schulz(u.data(), rows, cols, o);
  const T decay = static_cast<T>(1 - lr * o.weight_decay);
  const double step = muon_adjusted_lr(lr, rows, cols, o.adjust);
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<double>(p[i] * decay) - step * u[i]);
}

template void muon_update<float>(float*, const float*, float*, int64_t, int64_t, const MuonOptions&, double);
template void muon_update<double>(double*, const double*, double*, int64_t, int64_t, const MuonOptions&, double);

}  // namespace shardrt::optim
