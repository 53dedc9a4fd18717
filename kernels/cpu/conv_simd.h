// Vector row kernels of the im2col convolution (kernels/cpu/conv.cpp), compiled per instruction set with
// Highway and picked at run time. Internal to the conv kernel; not installed.
#pragma once
#include <cstdint>

namespace shardrt::kernels::cpu::conv_rows {

// dst[i] += src[i] for i < n: col2im's accumulation of one im2col row segment onto an input row.
void add_to(float* dst, const float* src, int64_t n);
void add_to(double* dst, const double* src, int64_t n);

}  // namespace shardrt::kernels::cpu::conv_rows
