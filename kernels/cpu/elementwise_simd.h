// The vector bodies of the elementwise kernels (kernels/cpu/elementwise_simd.cpp, dispatched at run time to the
// best SIMD target of the CPU). Each call covers one contiguous range on the calling thread; kernels/cpu/
// elementwise.cpp cuts the work into chunks and threads them.
#pragma once
#include <cstdint>

#include "kernels/elementwise_ops.h"

namespace shardrt::kernels::cpu::simd {

// y = f(x) over n contiguous elements; y may alias x. Every UnaryOp.
void unary(UnaryOp op, int64_t n, const float* x, float* y);
void unary(UnaryOp op, int64_t n, const double* x, double* y);

// gx = gy * f'(x) (from x and y = f(x)); gx may alias gy. Every UnaryOp.
void unary_backward(UnaryOp op, int64_t n, const float* x, const float* y, const float* gy, float* gx);
void unary_backward(UnaryOp op, int64_t n, const double* x, const double* y, const double* gy, double* gx);

// Whether binary() has a vector body for op (all but pow).
bool has_binary(BinaryOp op);
// out = a op b over n contiguous elements; out may alias a or b.
void binary(BinaryOp op, int64_t n, const float* a, const float* b, float* out);
void binary(BinaryOp op, int64_t n, const double* a, const double* b, double* out);

}  // namespace shardrt::kernels::cpu::simd
