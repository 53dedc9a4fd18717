// Backend parity at the op level, in the style of ggml's test-backend-ops: one table of cases, each an autograd
// expression over random inputs, run on the CPU (the oracle) and on cuda:0 with the same inputs and the same random
// grad_output; the output and the grad of every input must agree. The op level reaches the CUDA kernels through
// the paths a model uses (broadcast strides, non-contiguous inputs, the backward composition), which the kernel
// tests cannot.
//
// Without a GPU the CUDA run is skipped with a warning, and the same table still runs on the CPU as a check of the
// harness and of the f32 tolerances: every f32 case against its f64 oracle on the same (f32-rounded) inputs.
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/ops/attention_block.h"
#include "runtime/cuda_context.h"
#include "runtime/factories.h"
#include "kernels/cpu/conv.h"
#include "tests/autograd/op_testing.h"
#include "tests/kernels/cpu_kernel_cases.h"
#include "tests/support/threads.h"

using namespace shardrt;
using namespace shardrt::test;

namespace {

// ---- the table ------------------------------------------------------------------------------------------------

// Where an input's values are drawn: ops with a restricted domain (log, sqrt, pow's base), kinks at 0 (abs,
// relu), division, and comparisons that need ties (a quarter grid makes equal pairs common).
enum class Domain { normal, positive, away_from_zero, quarter_grid };

using CaseFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct ParityCase {
  std::string name;
  std::vector<Shape> inputs;  // every input is a leaf of `dtype` that requires grad
  DType dtype;
  double tol;  // |got - want| <= tol * (1 + |want|) elementwise, for the output and every input grad
  Domain domain;
  CaseFn fn;
};

// Against an oracle in the same dtype on another backend, f64 differs only by summation order and libm ulps.
constexpr double kF64Tol = 1e-10;

// One row of the table before it is expanded into an f32 and an f64 case. f32_tol bounds a CPU f32 run against
// the f64 oracle: 1e-6 for elementwise ops, 1e-5 where values are accumulated (reductions, matmul, norms,
// losses), 0 for exact results (comparisons, argmax). The measured CPU errors are 5x to 1000x below these.
struct Op {
  const char* name;
  std::vector<Shape> inputs;
  double f32_tol;
  Domain domain;
  CaseFn fn;
};

// Fixed class targets for cross_entropy, on the logits' device.
Tensor targets_like(const Tensor& logits) {
  return from_vector({4, 0, 2, 2, 1, 3}, {6}, {DType::i64, Device::cpu()}).to(logits.device());
}

// Attention's two outputs as one flat tensor, so the random grad_output reaches both out and lse.
Tensor attention_out_and_lse(const Tensor& q, const Tensor& k, const Tensor& v) {
  const AttentionOutput a = scaled_dot_product_attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  return cat({a.out.reshape({a.out.numel()}), a.lse.reshape({a.lse.numel()})}, 0);
}

DType other_float(DType t) { return t == DType::f32 ? DType::f64 : DType::f32; }

std::vector<Op> ops() {
  using In = const std::vector<Tensor>&;
  const Shape m = {7, 33};
  return {
      // ---- unary (autograd/ops/unary.cpp) ----
      {"neg", {m}, 1e-6, Domain::normal, [](In x) { return neg(x[0]); }},
      {"exp", {m}, 1e-6, Domain::normal, [](In x) { return exp(x[0]); }},
      {"log", {m}, 1e-6, Domain::positive, [](In x) { return log(x[0]); }},
      {"sqrt", {m}, 1e-6, Domain::positive, [](In x) { return sqrt(x[0]); }},
      {"rsqrt", {m}, 1e-6, Domain::positive, [](In x) { return rsqrt(x[0]); }},
      {"tanh", {m}, 1e-6, Domain::normal, [](In x) { return tanh(x[0]); }},
      {"erf", {m}, 1e-6, Domain::normal, [](In x) { return erf(x[0]); }},
      {"abs", {m}, 1e-6, Domain::away_from_zero, [](In x) { return abs(x[0]); }},
      {"relu", {m}, 1e-6, Domain::away_from_zero, [](In x) { return relu(x[0]); }},
      {"gelu erf", {m}, 1e-6, Domain::normal, [](In x) { return gelu(x[0]); }},
      {"gelu tanh", {m}, 1e-6, Domain::normal, [](In x) { return gelu(x[0], GeluApprox::tanh); }},
      {"silu", {m}, 1e-6, Domain::normal, [](In x) { return silu(x[0]); }},
      {"sigmoid", {m}, 1e-6, Domain::normal, [](In x) { return sigmoid(x[0]); }},
      {"pow_scalar 2.5", {m}, 1e-6, Domain::positive, [](In x) { return pow_scalar(x[0], 2.5); }},
      {"pow_scalar 3", {m}, 1e-6, Domain::normal, [](In x) { return pow_scalar(x[0], 3.0); }},
      {"pow_scalar 0", {m}, 1e-6, Domain::normal, [](In x) { return add(pow_scalar(x[0], 0.0), x[0]); }},
      {"clamp", {m}, 1e-6, Domain::normal, [](In x) { return clamp(x[0], -0.6, 0.4); }},
      {"add_scalar, mul_scalar", {m}, 1e-6, Domain::normal,
       [](In x) { return add_scalar(mul_scalar(x[0], -1.5), 0.25); }},
      {"to_dtype there and back", {m}, 1e-6, Domain::normal,
       [](In x) { return to_dtype(to_dtype(x[0], other_float(x[0].dtype())), x[0].dtype()); }},
      {"exp of a transposed view", {{33, 7}}, 1e-6, Domain::normal, [](In x) { return exp(transpose(x[0], 0, 1)); }},
      {"gelu of a narrowed view", {m}, 1e-6, Domain::normal, [](In x) { return gelu(narrow(x[0], 1, 3, 20)); }},
      {"tanh over many blocks", {{3, 4099}}, 1e-6, Domain::normal, [](In x) { return tanh(x[0]); }},

      // ---- binary, comparisons, where (autograd/ops/binary.cpp) ----
      {"add, row broadcast", {m, {33}}, 1e-6, Domain::normal, [](In x) { return add(x[0], x[1]); }},
      {"sub, outer broadcast", {{7, 1}, {1, 33}}, 1e-6, Domain::normal, [](In x) { return sub(x[0], x[1]); }},
      {"mul, rank-3 broadcast", {{4, 1, 5}, {3, 1}}, 1e-6, Domain::normal, [](In x) { return mul(x[0], x[1]); }},
      {"div, column broadcast", {m, {7, 1}}, 1e-6, Domain::away_from_zero, [](In x) { return div(x[0], x[1]); }},
      {"pow", {{5, 6}, {6}}, 1e-6, Domain::positive, [](In x) { return pow(x[0], x[1]); }},
      {"maximum", {{3, 4, 5}, {4, 1}}, 1e-6, Domain::normal, [](In x) { return maximum(x[0], x[1]); }},
      {"minimum, scalar operand", {{6, 5}, {1}}, 1e-6, Domain::normal, [](In x) { return minimum(x[0], x[1]); }},
      {"add of a transposed and a contiguous operand", {{33, 7}, m}, 1e-6, Domain::normal,
       [](In x) { return add(transpose(x[0], 0, 1), x[1]); }},
      {"add over many blocks", {{3, 4099}, {4099}}, 1e-6, Domain::normal, [](In x) { return add(x[0], x[1]); }},
      {"mul with 8 broadcast dims", {{2, 3, 1, 2, 3, 2, 1, 3}, {3, 2, 1, 3, 1, 2, 1}}, 1e-5, Domain::normal,
       [](In x) { return mul(x[0], x[1]); }},
      {"mul of a permuted operand with broadcast", {{6, 3, 4}, {3, 1, 6}}, 1e-6, Domain::normal,
       [](In x) { return mul(permute(x[0], {1, 2, 0}), x[1]); }},
      {"eq, ne as values", {{5, 6}, {6}}, 0.0, Domain::quarter_grid,
       [](In x) {
         const DType t = x[0].dtype();
         return add(to_dtype(eq(x[0], x[1]), t), mul_scalar(to_dtype(ne(x[0], x[1]), t), 2.0));
       }},
      {"lt, le, gt, ge as values", {{5, 6}, {5, 1}}, 0.0, Domain::quarter_grid,
       [](In x) {
         const DType t = x[0].dtype();
         return add(add(to_dtype(lt(x[0], x[1]), t), mul_scalar(to_dtype(le(x[0], x[1]), t), 2.0)),
                    add(mul_scalar(to_dtype(gt(x[0], x[1]), t), 4.0), mul_scalar(to_dtype(ge(x[0], x[1]), t), 8.0)));
       }},
      {"where with a broadcast condition", {{5, 6}, {5, 1}, {1, 6}}, 1e-6, Domain::quarter_grid,
       [](In x) { return where(ge(x[1], x[2]), x[0], mul(x[1], x[2])); }},

      // ---- reductions (autograd/ops/reduce.cpp) ----
      {"sum of all", {m}, 1e-5, Domain::normal, [](In x) { return sum(x[0]); }},
      {"sum over dim 0, keepdim", {m}, 1e-5, Domain::normal, [](In x) { return sum(x[0], {0}, true); }},
      {"sum of a transposed view", {{33, 7}}, 1e-5, Domain::normal,
       [](In x) { return sum(transpose(x[0], 0, 1), {1}); }},
      {"mean over dims 0 and 2", {{3, 4, 5}}, 1e-5, Domain::normal, [](In x) { return mean(x[0], {0, 2}); }},
      {"amax over the last dim", {m}, 1e-6, Domain::normal, [](In x) { return amax(x[0], {-1}); }},
      {"amin over dim 0, keepdim", {{5, 4, 3}}, 1e-6, Domain::normal, [](In x) { return amin(x[0], {0}, true); }},
      {"logsumexp over the last dim", {m}, 1e-5, Domain::normal, [](In x) { return logsumexp(x[0], {1}); }},
      {"logsumexp over dims 0 and 2", {{3, 4, 5}}, 1e-5, Domain::normal, [](In x) { return logsumexp(x[0], {0, 2}); }},
      {"sum over a long dim", {{2, 4099, 3}}, 1e-5, Domain::normal, [](In x) { return sum(x[0], {1}); }},
      {"mean over a long row", {{3, 4099}}, 1e-5, Domain::normal, [](In x) { return mean(x[0], {1}); }},
      {"amax over a long row", {{3, 4099}}, 1e-6, Domain::normal, [](In x) { return amax(x[0], {1}); }},
      {"logsumexp over a long dim", {{2, 4099, 3}}, 1e-5, Domain::normal, [](In x) { return logsumexp(x[0], {1}); }},
      {"sum over an empty dim", {{3, 0, 4}}, 1e-6, Domain::normal, [](In x) { return sum(x[0], {1}); }},
      {"sum of an empty batch", {{0, 7}}, 1e-6, Domain::normal, [](In x) { return sum(x[0], {1}); }},
      {"argmax as values", {{5, 9, 4}}, 0.0, Domain::normal, [](In x) { return argmax(x[0], 1); }},

      // ---- softmax (autograd/ops/softmax.cpp) ----
      {"softmax over the last dim", {m}, 1e-6, Domain::normal, [](In x) { return softmax(x[0], -1); }},
      {"softmax over a middle dim", {{5, 7, 3}}, 1e-6, Domain::normal, [](In x) { return softmax(x[0], 1); }},
      {"softmax over a long row", {{3, 4099}}, 1e-6, Domain::normal, [](In x) { return softmax(x[0], 1); }},
      {"log_softmax over dim 0", {{9, 5}}, 1e-5, Domain::normal, [](In x) { return log_softmax(x[0], 0); }},
      {"log_softmax of a transposed view", {{33, 7}}, 1e-5, Domain::normal,
       [](In x) { return log_softmax(transpose(x[0], 0, 1), 1); }},

      // ---- layer norm (autograd/ops/norm.cpp) ----
      {"layer_norm with weight and bias", {m, {33}, {33}}, 1e-5, Domain::normal,
       [](In x) { return layer_norm(x[0], {33}, x[1], x[2]); }},
      {"layer_norm over two dims", {{2, 3, 8}, {3, 8}, {3, 8}}, 1e-5, Domain::normal,
       [](In x) { return layer_norm(x[0], {3, 8}, x[1], x[2]); }},
      {"layer_norm without parameters", {m}, 1e-5, Domain::normal, [](In x) { return layer_norm(x[0], {33}); }},
      {"layer_norm of a transposed view", {{33, 7}, {33}}, 1e-5, Domain::normal,
       [](In x) { return layer_norm(transpose(x[0], 0, 1), {33}, x[1]); }},

      // ---- matmul, bmm, linear (autograd/ops/matmul.cpp) ----
      {"matmul", {{5, 7}, {7, 6}}, 1e-5, Domain::normal, [](In x) { return matmul(x[0], x[1]); }},
      {"matmul with broadcast batch dims", {{2, 1, 5, 7}, {3, 7, 6}}, 1e-5, Domain::normal,
       [](In x) { return matmul(x[0], x[1]); }},
      {"matmul vector by matrix", {{7}, {7, 6}}, 1e-5, Domain::normal, [](In x) { return matmul(x[0], x[1]); }},
      {"matmul matrix by vector", {{5, 7}, {7}}, 1e-5, Domain::normal, [](In x) { return matmul(x[0], x[1]); }},
      {"matmul of transposed operands", {{7, 5}, {6, 7}}, 1e-5, Domain::normal,
       [](In x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); }},
      {"bmm", {{3, 5, 7}, {3, 7, 6}}, 1e-5, Domain::normal, [](In x) { return bmm(x[0], x[1]); }},
      {"linear with bias", {{4, 5, 7}, {6, 7}, {6}}, 1e-5, Domain::normal,
       [](In x) { return linear(x[0], x[1], x[2]); }},
      {"linear without bias", {{5, 7}, {6, 7}}, 1e-5, Domain::normal, [](In x) { return linear(x[0], x[1]); }},
      // On cuda, f32 linear with a bias runs one cuBLASLt GEMM with the bias epilogue (kernels/cuda/gemm_lt.h).
      // 2e-5: the weight grad sums 210 rows in f32; the -O1 sanitized build (tools/test --sanitize) rounds it to
      // 1.03e-5 of the f64 oracle, the optimised build to under 1e-5.
      {"linear with bias then gelu, model-sized rows (the fused epilogue)", {{3, 70, 48}, {96, 48}, {96}}, 2e-5,
       Domain::normal, [](In x) { return gelu(linear(x[0], x[1], x[2])); }},

      // ---- attention (autograd/ops/attention.cpp): several query and key tiles, odd head dims, Dv != D ----
      {"attention, odd head dim and Dv != D", {{2, 3, 9, 5}, {2, 3, 11, 5}, {2, 3, 11, 7}}, 1e-5, Domain::normal,
       [](In x) { return attention_out_and_lse(x[0], x[1], x[2]); }},
      {"attention, head dim 64 over several tiles", {{1, 2, 41, 64}, {1, 2, 70, 64}, {1, 2, 70, 64}}, 1e-5,
       Domain::normal, [](In x) { return attention_out_and_lse(x[0], x[1], x[2]); }},
      {"attention of (B, N, H, D) views, as the models call it", {{2, 37, 2, 8}, {2, 37, 2, 8}, {2, 37, 2, 8}}, 1e-5,
       Domain::normal,
       [](In x) {
         return attention_out_and_lse(transpose(x[0], 1, 2), transpose(x[1], 1, 2), transpose(x[2], 1, 2));
       }},
      {"attention, one query and one key", {{1, 1, 3}, {1, 1, 3}, {1, 1, 2}}, 1e-5, Domain::normal,
       [](In x) { return attention_out_and_lse(x[0], x[1], x[2]); }},

      // ---- shape ops and copies (autograd/ops/shape.cpp) ----
      {"contiguous copy of a permuted view", {{4, 5, 6}, {6, 4, 5}}, 1e-6, Domain::normal,
       [](In x) { return mul(contiguous(permute(x[0], {2, 0, 1})), x[1]); }},
      {"reshape, unsqueeze, squeeze, select", {{6, 10}}, 1e-6, Domain::normal,
       [](In x) { return exp(select(squeeze(unsqueeze(reshape(x[0], {3, 4, 5}), 0), 0), 1, 2)); }},
      {"expand then reduce", {{1, 4, 1}}, 1e-5, Domain::normal,
       [](In x) { return sum(mul(expand(x[0], {3, 4, 5}), expand(x[0], {3, 4, 5})), {0}); }},
      {"cat of uneven parts", {{3, 2}, {3, 5}}, 1e-6, Domain::normal,
       [](In x) { return cat({x[0], mul(x[1], x[1])}, 1); }},
      {"split and recombine", {{4, 7}}, 1e-6, Domain::normal,
       [](In x) {
         const std::vector<Tensor> parts = split(x[0], {2, 5}, 1);
         return mul(sum(parts[0], {1}, true), parts[1]);
       }},

      // ---- losses built from the ops above (autograd/ops/loss.cpp) ----
      {"mse_loss", {m, m}, 1e-5, Domain::normal, [](In x) { return mse_loss(x[0], x[1]); }},
      {"relative_l2_loss", {m, m}, 1e-5, Domain::normal, [](In x) { return relative_l2_loss(x[0], x[1]); }},
      {"cross_entropy", {{6, 5}}, 1e-5, Domain::normal,
       [](In x) { return cross_entropy(x[0], targets_like(x[0])); }},
  };
}

// ---- convolution, group norm, pooling, upsampling, padding, indexing (cuDNN conv and kernels/cuda/{group_norm,
// pool, upsample, shape_ops, index}.cu) --------------------------------------------------------------------------

// An i64 index on x's device whose values cycle through [0, n) with a stride coprime to n, so that rows repeat
// (the scatters' sums are exercised) and appear out of order.
Tensor cycling_index(const Tensor& x, const Shape& shape, int64_t n) {
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>((i * 3 + 1) % static_cast<size_t>(n));
  return indices(values, shape).to(x.device());
}

std::vector<Op> spatial_and_index_ops() {
  using In = const std::vector<Tensor>&;
  return {
      // ---- convolution (autograd/ops/conv.cpp) ----
      {"conv1d stride 2, padding 1, dilation 2, bias", {{2, 3, 11}, {4, 3, 3}, {4}}, 1e-5, Domain::normal,
       [](In x) { return conv1d(x[0], x[1], x[2], 2, 1, 2); }},
      {"conv2d uneven stride and padding, bias", {{2, 3, 7, 6}, {5, 3, 3, 2}, {5}}, 1e-5, Domain::normal,
       [](In x) { return conv(x[0], x[1], x[2], {2, 1}, {1, 0}); }},
      {"conv2d without bias, 1x1 kernel", {{2, 4, 5, 5}, {3, 4, 1, 1}}, 1e-5, Domain::normal,
       [](In x) { return conv2d(x[0], x[1]); }},
      {"conv3d padding 1, bias", {{1, 2, 5, 4, 6}, {3, 2, 2, 3, 2}, {3}}, 1e-5, Domain::normal,
       [](In x) { return conv3d(x[0], x[1], x[2], 1, 1); }},
      {"conv2d of a transposed input", {{2, 3, 6, 7}, {4, 3, 3, 3}, {4}}, 1e-5, Domain::normal,
       [](In x) { return conv2d(transpose(x[0], 2, 3), x[1], x[2], 1, 1); }},
      {"conv_transpose 2-d patches, bias", {{2, 4, 3, 3}, {4, 3, 2, 2}, {3}}, 1e-5, Domain::normal,
       [](In x) { return conv_transpose(x[0], x[1], x[2]); }},
      {"conv_transpose 3-d patches", {{1, 3, 2, 2, 2}, {3, 2, 2, 1, 2}}, 1e-5, Domain::normal,
       [](In x) { return conv_transpose(x[0], x[1]); }},

      // ---- group norm (autograd/ops/norm.cpp) ----
      {"group_norm with weight and bias", {{2, 6, 5, 4}, {6}, {6}}, 1e-5, Domain::normal,
       [](In x) { return group_norm(x[0], 3, x[1], x[2]); }},
      {"group_norm without parameters, one group", {{3, 4, 7}}, 1e-5, Domain::normal,
       [](In x) { return group_norm(x[0], 1); }},
      {"group_norm over a long group", {{2, 2, 4099}, {2}, {2}}, 1e-5, Domain::normal,
       [](In x) { return group_norm(x[0], 2, x[1], x[2]); }},

      // ---- pooling (autograd/ops/pool.cpp) ----
      {"avg_pool 2-d, padding counted", {{2, 3, 7, 8}}, 1e-6, Domain::normal,
       [](In x) { return avg_pool(x[0], {3, 2}, {2, 2}, {1, 0}); }},
      {"avg_pool 3-d, overlapping windows", {{1, 2, 5, 4, 6}}, 1e-6, Domain::normal,
       [](In x) { return avg_pool(x[0], {2, 2, 3}, {1, 2, 1}); }},
      {"max_pool 1-d with ties", {{2, 3, 9}}, 1e-6, Domain::quarter_grid,
       [](In x) { return max_pool(x[0], {3}, {2}, {1}); }},
      {"max_pool 2-d overlapping windows", {{2, 2, 6, 7}}, 1e-6, Domain::normal,
       [](In x) { return max_pool(x[0], {3, 3}, {1, 2}, {1, 1}); }},
      {"max_pool 3-d", {{1, 2, 4, 5, 6}}, 1e-6, Domain::normal, [](In x) { return max_pool(x[0], {2}); }},

      // ---- upsampling (autograd/ops/upsample.cpp) ----
      {"upsample_nearest 2-d up", {{2, 3, 4, 5}}, 1e-6, Domain::normal,
       [](In x) { return upsample_nearest(x[0], {7, 9}); }},
      {"upsample_nearest 1-d down", {{2, 3, 9}}, 1e-6, Domain::normal,
       [](In x) { return upsample_nearest(x[0], {4}); }},
      {"upsample_linear 1-d align_corners", {{2, 3, 5}}, 1e-6, Domain::normal,
       [](In x) { return upsample_linear(x[0], {9}, true); }},
      {"upsample_linear 2-d (bilinear)", {{1, 2, 4, 3}}, 1e-6, Domain::normal,
       [](In x) { return upsample_linear(x[0], {7, 8}); }},
      {"upsample_linear 3-d (trilinear), mixed up and down", {{1, 2, 3, 5, 4}}, 1e-6, Domain::normal,
       [](In x) { return upsample_linear(x[0], {5, 3, 6}); }},

      // ---- padding (autograd/ops/shape.cpp) ----
      {"pad constant with a crop", {{2, 3, 5, 6}}, 1e-6, Domain::normal,
       [](In x) { return pad(x[0], {2, -1, 1, 3}, PadMode::constant, 0.5); }},
      {"pad reflect 2-d", {{2, 3, 5, 6}}, 1e-6, Domain::normal,
       [](In x) { return pad(x[0], {2, 3, 1, 4}, PadMode::reflect); }},
      {"pad replicate 3-d", {{1, 2, 3, 4, 3}}, 1e-6, Domain::normal,
       [](In x) { return pad(x[0], {1, 2, 2, 0, 3, 1}, PadMode::replicate); }},
      {"pad circular 1-d", {{2, 3, 5}}, 1e-6, Domain::normal,
       [](In x) { return pad(x[0], {4, 5}, PadMode::circular); }},

      // ---- indexing (autograd/ops/index.cpp) ----
      {"index_select rows with repeats", {{5, 4}}, 1e-6, Domain::normal,
       [](In x) { return index_select(x[0], 0, cycling_index(x[0], {9}, 5)); }},
      {"index_select a middle dim", {{3, 6, 4}}, 1e-6, Domain::normal,
       [](In x) { return index_select(x[0], 1, cycling_index(x[0], {8}, 6)); }},
      {"gather along dim 1 with a smaller index", {{4, 6, 3}}, 1e-6, Domain::normal,
       [](In x) { return gather(x[0], 1, cycling_index(x[0], {3, 7, 2}, 6)); }},
      {"scatter_add into rows, repeated targets", {{5, 4}, {6, 4}}, 1e-6, Domain::normal,
       [](In x) { return scatter_add(x[0], 0, cycling_index(x[0], {6, 4}, 5), x[1]); }},
      {"scatter_add along the last dim, index smaller than src", {{3, 4, 5}, {3, 4, 7}}, 1e-6, Domain::normal,
       [](In x) { return scatter_add(x[0], 2, cycling_index(x[0], {2, 4, 6}, 5), x[1]); }},
  };
}

// ---- the models' own call paths (the audit of issue 17's "every op of the models in the table") -----------------
//
// Every public op of autograd/ops.h has a row above (view, the one that had none, is here). What the rows above
// did not reach: the attention block pieces the ring and all-gather attention patches call instead of the op
// (autograd/ops/attention_block.h: a block's forward with its LSE, the LSE merge, the block backward), zero-size
// operands as a zero-size shard hands them to the index and copy ops, and the operand layouts the models build
// (broadcast learned queries, a channels-last grid permuted into a conv, a stride = kernel patch embedding, GALE's
// slice softmax over a broadcast temperature). Ops with no CUDA kernel: none (docs/gpu.md, "The backend parity
// table"); the optimizer updates and the neighbour search are not autograd ops and have their own CUDA tests.

// Two K/V blocks of a ring step: each block's forward in two head slices folded into the running (out, lse) by the
// LSE merge, then each block's backward against the merged result, all flattened into one output. These pieces
// record no tape node (the patches record their own), so the row compares values only; grad_out and grad_lse are
// inputs. x: q (B, H, Nq, D), k1, v1, k2, v2, grad_out (BH, Nq, Dv), grad_lse (BH, Nq).
Tensor ring_attention_blocks(const std::vector<Tensor>& x) {
  const char* op = "backend parity ring blocks";
  const Tensor q = x[0].detach().contiguous();
  const int64_t bh = q.size(0) * q.size(1), nq = q.size(2), dv = x[2].size(-1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto packed = [](const Tensor& k, const Tensor& v) {
    return cat({k.detach().contiguous().view({-1}), v.detach().contiguous().view({-1})}, 0);
  };
  const Tensor kv[2] = {packed(x[1], x[2]), packed(x[3], x[4])};
  const int64_t nk[2] = {x[1].size(2), x[3].size(2)};
  const TensorOptions opt{q.dtype(), q.device()};
  const Tensor acc = zeros({bh, nq, dv}, opt), lse = full({bh, nq}, -std::numeric_limits<double>::infinity(), opt);
  for (int b = 0; b < 2; ++b)
    for (const ops_detail::HeadRange heads : {ops_detail::HeadRange{0, 2}, ops_detail::HeadRange{2, bh - 2}}) {
      const ops_detail::AttentionBlock blk = ops_detail::attention_block(op, q, kv[b], nk[b], dv, scale, heads);
      ops_detail::merge_attention_block(op, acc.narrow(0, heads.first, heads.count),
                                        lse.narrow(0, heads.first, heads.count), blk);
    }
  const Tensor gout = x[5].detach().contiguous(), glse = x[6].detach().contiguous();
  std::vector<Tensor> parts = {acc.view({-1}), lse.view({-1})};
  Tensor gq;
  for (int b = 0; b < 2; ++b) {
    const ops_detail::AttentionBlockGrads g =
        ops_detail::attention_block_backward(op, q, kv[b], nk[b], scale, acc, lse, gout, glse);
    gq = gq.defined() ? add(gq, g.q) : g.q;
    parts.push_back(g.kv);
  }
  parts.insert(parts.begin() + 2, gq.reshape({-1}));
  return cat(parts, 0);
}

// An empty i64 index on x's device.
Tensor empty_index(const Tensor& x, const Shape& shape) { return indices({}, shape).to(x.device()); }

std::vector<Op> model_path_ops() {
  using In = const std::vector<Tensor>&;
  return {
      {"view then exp", {{6, 10}}, 1e-6, Domain::normal, [](In x) { return exp(view(x[0], {3, 4, 5})); }},
      {"ring attention blocks: forward in head slices, LSE merge, block backward", {{2, 3, 9, 5}, {2, 3, 6, 5},
       {2, 3, 6, 7}, {2, 3, 8, 5}, {2, 3, 8, 7}, {6, 9, 7}, {6, 9}}, 1e-5, Domain::normal, ring_attention_blocks},
      {"attention with learned queries broadcast over the batch (FLARE)", {{1, 2, 4, 8}, {3, 2, 21, 8},
       {3, 2, 21, 8}}, 1e-5, Domain::normal,
       [](In x) { return attention_out_and_lse(expand(x[0], {3, 2, 4, 8}), x[1], x[2]); }},
      {"GALE slice weights: softmax of a linear over a broadcast clamped temperature", {{2, 13, 3, 4}, {5, 4}, {5},
       {1, 1, 3, 1}}, 1e-5, Domain::positive,
       [](In x) { return softmax(div(linear(x[0], x[1], x[2]), clamp(x[3], 0.1, 5.0)), -1); }},
      {"GALE slice tokens: weights transposed against the features, normalised", {{2, 11, 4}, {2, 11, 6}}, 1e-5,
       Domain::positive,
       [](In x) {
         return div(matmul(transpose(x[0], 1, 2), x[1]), add_scalar(unsqueeze(sum(x[0], {1}), -1), 1e-5));
       }},
      {"conv2d stride = kernel (the ViT patch embedding), flattened to tokens", {{1, 3, 8, 12}, {6, 3, 4, 4}, {6}},
       1e-5, Domain::normal, [](In x) { return transpose(reshape(conv2d(x[0], x[1], x[2], 4), {1, 6, 6}), 1, 2); }},
      {"conv2d 3x3 of a channels-last grid permuted in (structured GeoTransolver)", {{2, 5, 6, 4}, {3, 4, 3, 3},
       {3}}, 1e-5, Domain::normal,
       [](In x) { return permute(conv2d(permute(x[0], {0, 3, 1, 2}), x[1], x[2], 1, 1), {0, 2, 3, 1}); }},
      {"cat with a zero-size part (a zero-size shard)", {{3, 0}, {3, 5}}, 1e-6, Domain::normal,
       [](In x) { return cat({x[0], mul(x[1], x[1])}, 1); }},
      {"split with a zero-size part", {{4, 7}}, 1e-6, Domain::normal,
       [](In x) {
         const std::vector<Tensor> parts = split(x[0], {0, 7}, 1);
         return add(sum(parts[0], {1}, true), exp(parts[1]));
       }},
      {"index_select with an empty index beside a use of the rows", {{5, 4}}, 1e-6, Domain::normal,
       [](In x) { return cat({index_select(x[0], 0, empty_index(x[0], {0})), exp(x[0])}, 0); }},
      {"scatter_add of an empty source", {{5, 4}, {0, 4}}, 1e-6, Domain::normal,
       [](In x) { return mul(scatter_add(x[0], 0, empty_index(x[0], {0, 4}), x[1]), x[0]); }},
      {"gather along dim 0 with an empty index beside a use", {{4, 3}}, 1e-6, Domain::normal,
       [](In x) { return cat({gather(x[0], 0, empty_index(x[0], {0, 3})), tanh(x[0])}, 0); }},
  };
}

// Every op of the table once in f32 and once in f64.
std::vector<ParityCase> parity_cases() {
  std::vector<ParityCase> cases;
  std::vector<Op> table = ops();
  for (Op& op : spatial_and_index_ops()) table.push_back(std::move(op));
  for (Op& op : model_path_ops()) table.push_back(std::move(op));
  for (const Op& op : table) {
    cases.push_back({std::string(op.name) + " [f32]", op.inputs, DType::f32, op.f32_tol, op.domain, op.fn});
    cases.push_back({std::string(op.name) + " [f64]", op.inputs, DType::f64, kF64Tol, op.domain, op.fn});
  }
  return cases;
}

// ---- the harness ----------------------------------------------------------------------------------------------

Tensor draw(const Shape& shape, Domain domain, Generator& gen) {
  switch (domain) {
    case Domain::normal: return normal(shape, gen);
    case Domain::positive: return uniform(shape, gen, 0.3, 2.0);
    case Domain::away_from_zero: return away_from_zero(shape, gen);
    case Domain::quarter_grid: {
      Vec v = uniform(shape, gen, -1.0, 1.0).to_vector();
      for (double& e : v) e = std::round(e * 4) / 4;
      return from_vector(v, shape, kF64);
    }
  }
  return Tensor();
}

// A case's inputs, drawn in f64 and rounded to the case's dtype, so that a run in any dtype sees the same values.
std::vector<Tensor> case_inputs(const ParityCase& c, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> inputs;
  for (const Shape& s : c.inputs) inputs.push_back(draw(s, c.domain, gen).to(c.dtype).to(DType::f64));
  return inputs;
}

// The output and every input grad of one run, copied to the host in f64 (undefined where an input got no grad).
struct Run {
  Tensor out;
  std::vector<Tensor> grads;
  bool backpropagated = false;  // false when the output carries no grad (comparisons, argmax)
};

// Runs c.fn on the inputs cast to `dtype` on `device`, then backpropagates a random grad_output drawn from
// grad_seed for the output's shape and rounded to the case's dtype (skipped when the output carries no grad).
Run run_case(const ParityCase& c, const std::vector<Tensor>& inputs, uint64_t grad_seed, DType dtype, Device device) {
  std::vector<Tensor> leaves;  // fresh leaves: to() returns x itself when nothing changes, and x is shared by runs
  for (const Tensor& x : inputs) leaves.push_back(requiring_grad(x.to(dtype).to(device).detach()));
  const Tensor out = c.fn(leaves);
  Run r{out.to(Device::cpu()).to(DType::f64), {}, requires_grad(out)};
  if (r.backpropagated) {
    Generator gen(grad_seed);
    backward(out, normal(out.shape(), gen).to(c.dtype).to(dtype).to(device));
  }
  for (const Tensor& leaf : leaves) {
    const Tensor g = grad_of(leaf);
    r.grads.push_back(g.defined() ? g.to(Device::cpu()).to(DType::f64) : Tensor());
  }
  return r;
}

// Worst |got - want| / (1 + |want|), NaN counting as infinite unless both are NaN.
double worst_error(const Tensor& got, const Tensor& want) {
  const Vec g = got.to_vector(), w = want.to_vector();
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if ((std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i]) continue;
    const double err = std::abs(g[i] - w[i]) / (1.0 + std::abs(w[i]));
    worst = std::isnan(err) ? std::numeric_limits<double>::infinity() : std::max(worst, err);
  }
  return worst;
}

// Empty when got agrees with want within tol everywhere; otherwise says which tensor differs and how.
std::string mismatch(const Run& got, const Run& want, double tol) {
  std::ostringstream why;
  auto compare = [&](const std::string& what, const Tensor& g, const Tensor& w) {
    if (g.defined() != w.defined()) {
      why << what << (g.defined() ? " is defined but the oracle's is not; " : " is missing; ");
    } else if (g.defined() && g.shape() != w.shape()) {
      why << what << " has shape " << shape_str(g.shape()) << ", the oracle " << shape_str(w.shape()) << "; ";
    } else if (g.defined()) {
      const double err = worst_error(g, w);
      if (!(err <= tol)) why << what << ": worst relative error " << err << " > " << tol << "; ";
    }
  };
  compare("output", got.out, want.out);
  if (got.grads.size() != want.grads.size()) return why.str() + "input count differs";
  for (size_t i = 0; i < want.grads.size(); ++i)
    compare("grad of input " + std::to_string(i), got.grads[i], want.grads[i]);
  return why.str();
}

uint64_t case_seed(size_t index) { return 1000 + 2 * index; }

}  // namespace

TEST_CASE("backend parity: every op on cuda:0 matches the cpu oracle, output and input grads", "[backend][cuda]") {
  const std::vector<ParityCase> cases = parity_cases();
  if (!cuda_available()) {
    WARN("skipped: no CUDA device; the cpu harness test runs the "
         << cases.size() / 2 << " f32 cases against their f64 oracle instead");
    return;
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const ParityCase& c = cases[i];
    INFO("case " << c.name);
    const std::vector<Tensor> inputs = case_inputs(c, case_seed(i));
    const Run want = run_case(c, inputs, case_seed(i) + 1, c.dtype, Device::cpu());
    // An op that throws on cuda (a missing kernel, a launch error) fails its own case, not the rest of the table.
    std::string why;
    try {
      why = mismatch(run_case(c, inputs, case_seed(i) + 1, c.dtype, Device::cuda(0)), want, c.tol);
    } catch (const std::exception& e) {
      why = std::string("threw on cuda: ") + e.what();
    }
    INFO(why);
    CHECK(why.empty());
  }
}

TEST_CASE("backend parity harness: every f32 case on the cpu matches its f64 oracle", "[backend]") {
  const std::vector<ParityCase> cases = parity_cases();
  size_t checked = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const ParityCase& c = cases[i];
    if (c.dtype != DType::f32) continue;
    INFO("case " << c.name);
    const std::vector<Tensor> inputs = case_inputs(c, case_seed(i));
    const Run want = run_case(c, inputs, case_seed(i) + 1, DType::f64, Device::cpu());
    const Run got = run_case(c, inputs, case_seed(i) + 1, DType::f32, Device::cpu());
    // A case that backpropagates into non-empty inputs must reach them, so its grad comparison cannot pass
    // vacuously.
    bool any_nonempty_grad = false, any_nonzero_grad = false;
    for (const Tensor& g : want.grads) {
      if (!g.defined()) continue;
      any_nonempty_grad = any_nonempty_grad || g.numel() > 0;
      for (double e : g.to_vector()) any_nonzero_grad = any_nonzero_grad || e != 0.0;
    }
    if (want.backpropagated && any_nonempty_grad) CHECK(any_nonzero_grad);
    const std::string why = mismatch(got, want, c.tol);
    INFO(why);
    CHECK(why.empty());
    ++checked;
  }
  CHECK(checked == cases.size() / 2);
}

// Each output element of a CPU kernel is computed by one thread over a split that does not depend on the thread
// count (the GEMMs too: kernels/cpu/gemm.cpp tiles them itself), so every op gives the same bits at 1 and 2 threads.
TEST_CASE("backend parity harness: every cpu case gives the same bits at 1 and 2 threads", "[backend]") {
  const std::vector<ParityCase> cases = parity_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    const ParityCase& c = cases[i];
    INFO("case " << c.name << (c.dtype == DType::f32 ? " [f32]" : " [f64]"));
    const std::vector<Tensor> inputs = case_inputs(c, case_seed(i));
    Run one, two;
    test::with_threads(1, [&] { one = run_case(c, inputs, case_seed(i) + 1, c.dtype, Device::cpu()); });
    test::with_threads(2, [&] { two = run_case(c, inputs, case_seed(i) + 1, c.dtype, Device::cpu()); });
    const std::string why = mismatch(two, one, 0.0);
    INFO(why);
    CHECK(why.empty());
  }
}

// ---- the oneDNN and Winograd convolutions against the im2col reference path (kernels/cpu/conv.h) ---------------
// Every conv row of the table above, and rows that reach oneDNN's pieces, with kernels::cpu::ConvImpl::onednn, with
// ::automatic (Winograd for 3x3 stride 1) and with ::reference, output and every input grad: f32 within 1e-5, f64
// within 1e-12 (f64 runs the reference path in every mode: neither oneDNN nor the Winograd kernel has f64).

namespace {

// Sums of at most about 200 terms per output (the table's scale: f32 stays within 1e-5 of f64 at that length), but
// several channel groups (32 + 32, 32 + 18), sample chunks, bands of output rows (256 output positions each) with the
// shorter last band, and oneDNN's plain-input kernel for 3 channels.
std::vector<Op> onednn_conv_rows() {
  using In = const std::vector<Tensor>&;
  return {
      {"conv2d 3x1 64 -> 64, two samples, 60 rows", {{2, 64, 60, 10}, {64, 64, 3, 1}, {64}}, 1e-5, Domain::normal,
       [](In x) { return conv2d(x[0], x[1], x[2], 1, 1); }},
      {"conv2d 1x3 of a channels-last grid, 40 -> 50", {{1, 31, 11, 40}, {50, 40, 1, 3}, {50}}, 1e-5, Domain::normal,
       [](In x) { return conv2d(permute(x[0], {0, 3, 1, 2}), x[1], x[2], 1, 1); }},
      {"conv2d 3x3 3 -> 20 over 30 x 12 (plain input)", {{1, 3, 30, 12}, {20, 3, 3, 3}, {20}}, 1e-5, Domain::normal,
       [](In x) { return conv2d(x[0], x[1], x[2], 1, 1); }},
      {"conv1d 5-tap 35 -> 20", {{3, 35, 40}, {20, 35, 5}, {20}}, 1e-5, Domain::normal,
       [](In x) { return conv1d(x[0], x[1], x[2], 1, 2); }},
      {"conv3d 3x3x3 8 -> 17, stride 2", {{2, 8, 5, 6, 7}, {17, 8, 3, 3, 3}}, 1e-5, Domain::normal,
       [](In x) { return conv3d(x[0], x[1], Tensor(), 2, 1); }},
  };
}

Run run_with_conv_impl(kernels::cpu::ConvImpl impl, const ParityCase& c, const std::vector<Tensor>& inputs,
                       uint64_t grad_seed) {
  const test::ConvImplScope scope(impl);
  return run_case(c, inputs, grad_seed, c.dtype, Device::cpu());
}

}  // namespace

TEST_CASE("backend parity: the oneDNN and Winograd convolutions match the im2col reference path", "[backend][conv]") {
  std::vector<Op> rows;
  for (Op& op : spatial_and_index_ops())
    if (std::string(op.name).rfind("conv", 0) == 0) rows.push_back(std::move(op));
  for (Op& op : model_path_ops())
    if (std::string(op.name).find("conv2d") != std::string::npos) rows.push_back(std::move(op));
  for (Op& op : onednn_conv_rows()) rows.push_back(std::move(op));
  // onednn: oneDNN wherever it takes the shape; automatic: Winograd for the 3x3 stride-1 rows, oneDNN for the rest.
  for (const kernels::cpu::ConvImpl impl : {kernels::cpu::ConvImpl::onednn, kernels::cpu::ConvImpl::automatic}) {
    const bool onednn = impl == kernels::cpu::ConvImpl::onednn;
    if (onednn && !kernels::cpu::conv_onednn_built()) {
      WARN("skipped the oneDNN pass: this build has no oneDNN (libdnnl)");
      continue;
    }
    size_t differing = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      for (const DType dtype : {DType::f32, DType::f64}) {
        const ParityCase c{std::string(rows[i].name) + (dtype == DType::f32 ? " [f32]" : " [f64]"), rows[i].inputs,
                           dtype, dtype == DType::f32 ? 1e-5 : 1e-12, rows[i].domain, rows[i].fn};
        INFO("case " << c.name << (onednn ? ", oneDNN" : ", automatic (Winograd / oneDNN)"));
        const std::vector<Tensor> inputs = case_inputs(c, case_seed(700 + i));
        const Run reference = run_with_conv_impl(kernels::cpu::ConvImpl::reference, c, inputs, case_seed(700 + i) + 1);
        const Run fast = run_with_conv_impl(impl, c, inputs, case_seed(700 + i) + 1);
        const std::string why = mismatch(fast, reference, c.tol);
        INFO(why);
        CHECK(why.empty());
        if (dtype == DType::f32 && !mismatch(fast, reference, 0.0).empty()) ++differing;
      }
    }
    // The rows compare different computations: oneDNN's and Winograd's f32 sums round differently from the GEMM's.
    CHECK(differing > rows.size() / 2);
  }
}

TEST_CASE("backend parity harness: a rerun agrees exactly; a wrong output, grad or shape is reported", "[backend]") {
  const std::vector<ParityCase> cases = parity_cases();
  const ParityCase& c = cases.front();  // neg [f32]
  REQUIRE(c.name == "neg [f32]");
  const std::vector<Tensor> inputs = case_inputs(c, case_seed(0));
  const Run want = run_case(c, inputs, case_seed(0) + 1, DType::f64, Device::cpu());
  CHECK(mismatch(want, want, 0.0).empty());
  // Runs share the input tensors but not their grads: a second run does not accumulate onto the first.
  CHECK(mismatch(run_case(c, inputs, case_seed(0) + 1, DType::f64, Device::cpu()), want, 0.0).empty());

  Run wrong_out = want;
  wrong_out.out = mul_scalar(want.out, 1.0 + 1e-4);
  CHECK_THAT(mismatch(wrong_out, want, 1e-5), Catch::Contains("output"));

  Run wrong_grad = want;
  wrong_grad.grads[0] = add_scalar(want.grads[0], 1e-3);
  CHECK_THAT(mismatch(wrong_grad, want, 1e-5), Catch::Contains("grad of input 0"));

  Run missing_grad = want;
  missing_grad.grads[0] = Tensor();
  CHECK_THAT(mismatch(missing_grad, want, 1e-5), Catch::Contains("grad of input 0 is missing"));

  Run wrong_shape = want;
  wrong_shape.out = want.out.reshape({33, 7});
  CHECK_THAT(mismatch(wrong_shape, want, 1e-5), Catch::Contains("has shape"));
}

// ---- autocast rows (autograd/autocast.h): the matmul-class ops under bf16 / f16, cuda:0 against the cpu ----------
// Both backends run the same rule: operands (and, in backward, grad_output) rounded to the compute dtype, products
// accumulated in f32, f32 results. The cpu multiplies f32-held rounded values; cuda hands 16-bit operands to
// cuBLAS (CUBLAS_COMPUTE_32F) and to the 16-bit attention kernel, and runs cuDNN's f32 convolution over the rounded
// values. So GEMM and conv rows differ only by f32 summation order (1e-5, as the f32 rows); attention on cuda also
// writes out and the grads through 16-bit storage (one rounding, u = 2^-8 bf16 / 2^-11 f16, relative) and
// rounds out again for its backward's row sums: 4u.

namespace {

struct AutocastRow {
  const char* name;
  std::vector<Shape> inputs;
  bool attention;  // 4u instead of the f32 summation tolerance
  CaseFn fn;
};

std::vector<AutocastRow> autocast_rows() {
  using In = const std::vector<Tensor>&;
  return {
      {"matmul", {{3, 17, 24}, {24, 19}}, false, [](In x) { return matmul(x[0], x[1]); }},
      {"matmul broadcast", {{2, 1, 9, 16}, {3, 16, 11}}, false, [](In x) { return matmul(x[0], x[1]); }},
      {"bmm", {{4, 13, 20}, {4, 20, 7}}, false, [](In x) { return bmm(x[0], x[1]); }},
      {"linear", {{2, 9, 32}, {24, 32}, {24}}, false, [](In x) { return linear(x[0], x[1], x[2]); }},
      {"attention", {{2, 3, 40, 32}, {2, 3, 56, 32}, {2, 3, 56, 32}}, true,
       [](In x) { return attention_out_and_lse(x[0], x[1], x[2]); }},
      {"conv1d", {{2, 4, 23}, {6, 4, 3}, {6}}, false, [](In x) { return conv1d(x[0], x[1], x[2], 2, 1); }},
      {"conv2d", {{2, 3, 11, 9}, {5, 3, 3, 3}, {5}}, false, [](In x) { return conv2d(x[0], x[1], x[2], 1, 1); }},
      {"conv3d", {{1, 2, 6, 5, 4}, {3, 2, 3, 3, 3}, {3}}, false, [](In x) { return conv3d(x[0], x[1], x[2], 1, 1); }},
  };
}

// One autocast row as a ParityCase in f32, its fn run inside Autocast(compute).
ParityCase autocast_case(const AutocastRow& row, DType compute) {
  const double u = compute == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  CaseFn fn = [compute, f = row.fn](const std::vector<Tensor>& x) {
    Autocast scope(compute);
    return f(x);
  };
  return {std::string(row.name) + " [autocast " + dtype_name(compute) + "]", row.inputs, DType::f32,
          row.attention ? 4 * u : 1e-5, Domain::normal, fn};
}

// The backward runs outside fn's scope: each op's backward follows its forward's choice (autograd/autocast.h).
std::vector<ParityCase> autocast_cases() {
  std::vector<ParityCase> cases;
  for (const AutocastRow& row : autocast_rows())
    for (DType dt : {DType::bf16, DType::f16}) cases.push_back(autocast_case(row, dt));
  return cases;
}

}  // namespace

TEST_CASE("backend parity: autocast bf16 / f16 rows on cuda:0 match the cpu autocast run",
          "[backend][cuda][autocast]") {
  const std::vector<ParityCase> cases = autocast_cases();
  // Without a GPU: the rows still show that autocast changes the cpu result (the rounding is applied), so the cuda
  // comparison below compares rounded runs, not two plain f32 ones.
  for (size_t i = 0; i < cases.size(); ++i) {
    const ParityCase& c = cases[i];
    INFO("case " << c.name);
    const std::vector<Tensor> inputs = case_inputs(c, case_seed(500 + i));
    const Run scoped = run_case(c, inputs, case_seed(500 + i) + 1, DType::f32, Device::cpu());
    ParityCase plain = c;
    plain.fn = autocast_rows()[i / 2].fn;
    const Run f32 = run_case(plain, inputs, case_seed(500 + i) + 1, DType::f32, Device::cpu());
    CHECK(!mismatch(scoped, f32, 1e-7).empty());
  }
  if (!cuda_available()) {
    WARN("skipped: no CUDA device; the " << cases.size() << " autocast rows ran on the cpu only");
    return;
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const ParityCase& c = cases[i];
    INFO("case " << c.name);
    const std::vector<Tensor> inputs = case_inputs(c, case_seed(500 + i));
    const Run want = run_case(c, inputs, case_seed(500 + i) + 1, DType::f32, Device::cpu());
    std::string why;
    try {
      why = mismatch(run_case(c, inputs, case_seed(500 + i) + 1, DType::f32, Device::cuda(0)), want, c.tol);
    } catch (const std::exception& e) {
      why = std::string("threw on cuda: ") + e.what();
    }
    INFO(why);
    CHECK(why.empty());
  }
}
