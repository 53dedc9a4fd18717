// Register-tiled products of the fused small-head attention (kernels/cpu/attention_small.cpp): the three shapes a
// flash-attention step needs, written for head dims of a few vectors, where a BLAS call per tile costs more in
// calls and packing than the arithmetic (FLARE's head dim 16). Highway code compiled per target and dispatched at
// run time (kernels/cpu/simd.h); none of them threads. Internal to the attention kernel; not installed.
//
// Each output element is one running sum of fused multiply-adds in a fixed order (the contraction index
// ascending); vector lanes only hold different output elements, so the bits do not depend on how wide the target's
// vectors are (targets without FMA, SSE4, round the products separately).
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu::attention_tiles {

// s (rows x cols, leading dim lds) = a (rows x d, lda) times bt (d x cols, ldb): bt is the other operand stored
// transposed.
void scores(int64_t rows, int64_t cols, int64_t d, const float* a, int64_t lda, const float* bt, int64_t ldb,
            float* s, int64_t lds);
void scores(int64_t rows, int64_t cols, int64_t d, const double* a, int64_t lda, const double* bt, int64_t ldb,
            double* s, int64_t lds);

// acc (rows x n, ldacc) += p (rows x k, ldp) times v (k x n, ldv).
void combine_rows(int64_t rows, int64_t k, int64_t n, const float* p, int64_t ldp, const float* v, int64_t ldv,
                  float* acc, int64_t ldacc);
void combine_rows(int64_t rows, int64_t k, int64_t n, const double* p, int64_t ldp, const double* v, int64_t ldv,
                  double* acc, int64_t ldacc);

// acc (cols x n, ldacc) += p^T times x: p (rows x cols, ldp), x (rows x n, ldx); acc row c sums p[r][c] x[r] over r.
void combine_cols(int64_t rows, int64_t cols, int64_t n, const float* p, int64_t ldp, const float* x, int64_t ldx,
                  float* acc, int64_t ldacc);
void combine_cols(int64_t rows, int64_t cols, int64_t n, const double* p, int64_t ldp, const double* x, int64_t ldx,
                  double* acc, int64_t ldacc);

}  // namespace shardrt::kernels::cpu::attention_tiles
