// The op sets of the elementwise kernel family, shared by kernels/cpu/elementwise.h and
// kernels/cuda/elementwise.h: one type per set, so a caller passes the same value to either backend. What each op
// computes, including its NaN and kink rules, is stated here once and holds on both backends.
#pragma once

namespace shardrt::kernels {

// Unary maps y = f(x) and their derivatives gx = gy * f'(x).
// relu and abs propagate NaN. gelu_erf is 0.5 x (1 + erf(x / sqrt 2)); gelu_tanh is the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). At kinks, as in PyTorch: relu'(0) = 0, abs'(0) = 0.
enum class UnaryOp { neg, exp, log, sqrt, rsqrt, tanh, erf, abs, relu, gelu_erf, gelu_tanh, silu, sigmoid };

// Broadcasting binary maps out = a op b. maximum and minimum propagate NaN; pow follows the C math library's pow
// (std::pow on the CPU, the device pow() on CUDA), IEEE special cases included.
enum class BinaryOp { add, sub, mul, div, pow, maximum, minimum };

// Broadcasting comparisons out = (a op b) ? 1 : 0. Comparisons with NaN are false except ne, which is true.
enum class CompareOp { eq, ne, lt, le, gt, ge };

}  // namespace shardrt::kernels
