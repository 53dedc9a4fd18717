// Plain fp64 reference loops, written once from each op's definition, for the CPU-kernel, CUDA-kernel and
// autograd tests. Dense layouts are row-major; a dim op sees its tensor as (outer, n, inner) with the reduced or
// normalised dim in the middle, as the kernels do (kernels/README.md).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/shape_ops.h"
#include "kernels/cpu/upsample.h"

namespace shardrt::test {

using Vec = std::vector<double>;

// ---- gemm ---------------------------------------------------------------------------------------------------

// C = alpha op(A) op(B) + beta C, row-major, in place; beta == 0 ignores what C held (NaN included).
void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
              const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

// The same on vectors, returning the new C.
inline Vec ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const Vec& A, int64_t lda,
                    const Vec& B, int64_t ldb, double beta, const Vec& C, int64_t ldc) {
  Vec out = C;
  ref_gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, out.data(), ldc);
  return out;
}

// ---- elementwise --------------------------------------------------------------------------------------------

double ref_unary(kernels::cpu::UnaryOp op, double x);
double ref_binary(kernels::cpu::BinaryOp op, double a, double b);
bool ref_compare(kernels::cpu::CompareOp op, double a, double b);

// ---- reductions, softmax and norms over (outer, n, inner) ---------------------------------------------------

struct View {
  int64_t outer, n, inner;
  int64_t size() const { return outer * n * inner; }
  int64_t at(int64_t o, int64_t k, int64_t j) const { return (o * n + k) * inner + j; }
};

// Applies fn to each (o, j) column of x, collecting one output per column.
Vec ref_reduce(const View& v, const Vec& x, const std::function<double(const Vec&)>& fn);

double col_sum(const Vec& c);
double col_max(const Vec& c);  // -inf for an empty column
double col_min(const Vec& c);  // +inf for an empty column
double col_logsumexp(const Vec& c);

// Softmax (or log-softmax) of each column, straight from the definition with a max shift.
Vec ref_softmax(const View& v, const Vec& x, bool log);

struct NormRef {
  Vec y, mean, rstd;
};

// Normalises `groups` contiguous blocks of `block` elements each with the biased variance; channel_of maps an
// element to its index in weight and bias (either may be null).
NormRef ref_norm(const Vec& x, int64_t groups, int64_t block, const Vec* weight, const Vec* bias, double eps,
                 const std::function<int64_t(int64_t)>& channel_of);

// ---- attention ----------------------------------------------------------------------------------------------

// softmax(scale · q kᵀ) v and the row log-sum-exp, for q (BH, Nq, D), k (BH, Nk, D), v (BH, Nk, Dv). A row with
// no keys gets output 0 and lse = -inf.
void ref_attention(int64_t BH, int64_t Nq, int64_t Nk, int64_t D, int64_t Dv, double scale, const Vec& q,
                   const Vec& k, const Vec& v, Vec& out, Vec& lse);

// ---- convolution, pooling, resampling, padding on the kernels' 3-d geometry ---------------------------------

// Direct convolution: y[b, co, o] = bias[co] + Σ_ci Σ_tap x[b, ci, o·stride - pad + tap·dilation] w[co, ci, tap].
Vec ref_conv(const kernels::cpu::ConvGeometry& g, const Vec& x, const Vec& w, const Vec* bias);

// The geometry of a transposed conv whose kernel equals its stride: each input voxel becomes one output patch.
kernels::cpu::ConvGeometry patch_geometry(int nd, int64_t batch, int64_t c_in, int64_t c_out,
                                          const std::vector<int64_t>& in, const std::vector<int64_t>& patch);

// Transposed convolution with kernel == stride (each input voxel becomes one output patch):
// y[b, co, i·kernel + tap] = bias[co] + Σ_ci x[b, ci, i] w[ci, co, tap].
Vec ref_conv_transpose_patch(const kernels::cpu::ConvGeometry& g, const Vec& x, const Vec& w, const Vec* bias);

// Average (padding counted as zeros) and max (padding never wins) pooling over the windows of g, with c_in
// planes per batch entry; argmax is the flat in-plane index of the first maximum.
void ref_pool(const kernels::cpu::ConvGeometry& g, const Vec& x, Vec& avg, Vec& max, std::vector<int64_t>& argmax);

// PyTorch's interpolate in nd dims over `planes` planes, from its source-index formulas.
Vec ref_upsample(kernels::cpu::UpsampleMode mode, bool align_corners, int nd, int64_t planes, const int64_t* in,
                 const int64_t* out, const Vec& x);

// F.pad in nd trailing dims over `outer` leading entries; negative pads crop.
Vec ref_pad(kernels::cpu::PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* lo,
            const int64_t* hi, double value, const Vec& x);

}  // namespace shardrt::test
