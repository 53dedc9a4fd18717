// Vector row kernels of the blocked attention in kernels/cpu/attention.cpp: the online-softmax update of one
// score tile and the elementwise steps of the recomputing backward. Compiled for several instruction sets
// (Highway foreach_target) and picked at run time, so one binary uses AVX-512 where the CPU has it and AVX2 or
// SSE4 elsewhere. Internal to the attention kernel; not installed.
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu::attention_rows {

// One key block of the online softmax, for `rows` query rows. scores (rows × cols, leading dim cols) holds
// scale·q·k for the block and is overwritten with exp(score - m_new) where m_new = max(row_max, max of the row).
// row_sum becomes row_sum·exp(row_max - m_new) + Σ of the new row, row_max becomes m_new, and the unnormalised
// accumulator row acc_i (Dv values, leading dim ld_acc) is multiplied by exp(row_max - m_new) in the same pass,
// while the row is still in cache. A row whose scores are all -inf contributes nothing.
void online_softmax_block(int64_t rows, int64_t cols, float* scores, float* row_max, float* row_sum, float* acc,
                          int64_t Dv, int64_t ld_acc);
void online_softmax_block(int64_t rows, int64_t cols, double* scores, double* row_max, double* row_sum,
                          double* acc, int64_t Dv, int64_t ld_acc);

// acc_i /= row_sum_i and lse_i = row_max_i + log(row_sum_i), for the rows of one finished query block.
void finish_rows(int64_t rows, int64_t Dv, float* acc, const float* row_max, const float* row_sum, float* lse);
void finish_rows(int64_t rows, int64_t Dv, double* acc, const double* row_max, const double* row_sum, double* lse);

// p_ij = exp(p_ij - lse_i) over a rows × cols tile (leading dim cols): the probabilities, recomputed.
void probabilities(int64_t rows, int64_t cols, float* p, const float* lse);
void probabilities(int64_t rows, int64_t cols, double* p, const double* lse);

// ds_ij = p_ij · (ds_ij - term_i) over a rows × cols tile: the softmax Jacobian applied to dP.
void softmax_grad(int64_t rows, int64_t cols, const float* p, float* ds, const float* term);
void softmax_grad(int64_t rows, int64_t cols, const double* p, double* ds, const double* term);

}  // namespace shardrt::kernels::cpu::attention_rows
