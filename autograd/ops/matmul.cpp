// matmul (NumPy semantics), bmm and linear, through one strided-batched GEMM launcher.
//
// matmul reduces every case to C[i] = A[i] B[i] over a flat batch of B entries, A (Ba, M, K), B (Bb, K, N), where
// an operand whose batch dims are all 1 is shared by the whole batch (Ba or Bb = 1, batch stride 0; a shared right
// operand instead folds the batch into the rows of one GEMM) and an operand broadcast along only some batch dims is
// expanded to the full batch first. A 1-D left operand is a 1 x K row and a 1-D right operand a K x 1 column;
// those unit dims are dropped from the result.
//
// Autocast (autograd/autocast.h), for f32 inputs inside a bf16/f16 scope:
//   forward   C = round(A) round(B), accumulated in f32, C f32 (linear: y = round(x) round(W)^T + b, the bias
//             added in f32 — it is no product operand);
//   backward  dA = round(dC) round(B)^T and dB = round(A)^T round(dC) with the operands as the forward saved them
//             (already rounded), accumulated in f32, grads f32; linear's db = sum of the unrounded dy.
// round() is ops_detail::round_operand; on the CPU its f32-held values feed the f32 GEMM (exactly the products of
// a 16-bit GEMM with f32 accumulation: 8- and 11-bit significands multiply exactly in f32); on CUDA the 16-bit
// tensors go to cuBLAS with f32 output (kernels::cuda::gemm_strided_batched_mixed).
#include <algorithm>
#include <climits>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_lt.h"

namespace shardrt {

using namespace ops_detail;

namespace {

// C[i] = op(A[i]) op(B[i]) + beta C[i] for i < batch, row-major, matrix i of X starting at X + i * stride_x.
struct Gemm {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  double beta = 0.0;
};

// A and B have C's dtype, or (autocast on CUDA) are both bf16 or both f16 with C f32.
void launch_gemm(const char* name, const Gemm& g, const Tensor& A, const Tensor& B, const Tensor& C) {
  for (int64_t v : {g.M, g.N, g.K, g.lda, g.ldb, g.ldc})
    SHARDRT_CHECK(v <= INT_MAX, ShapeError, name, ": a matrix dimension of ", v, " exceeds the 32-bit BLAS limit (",
                  A.str(), " x ", B.str(), ")");
  // BLAS wants leading dimensions >= 1 even for empty matrices.
  const int64_t lda = std::max<int64_t>(g.lda, 1), ldb = std::max<int64_t>(g.ldb, 1), ldc = std::max<int64_t>(g.ldc, 1);
  dispatch_float(name, C, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        C,
        [&] {
          kernels::cpu::gemm_batched<T>(g.trans_a, g.trans_b, g.M, g.N, g.K, T(1), A.data<T>(), lda, B.data<T>(),
                                        ldb, T(g.beta), C.data<T>(), ldc, g.batch, g.stride_a, g.stride_b,
                                        g.stride_c);
        },
        [&](CudaStream s) {
          if (A.dtype() != C.dtype()) {
            kernels::cuda::gemm_strided_batched_mixed(A.dtype(), g.trans_a, g.trans_b, g.M, g.N, g.K, 1.0,
                                                      A.raw_data(), lda, B.raw_data(), ldb, g.beta, C.data<float>(),
                                                      ldc, g.batch, g.stride_a, g.stride_b, g.stride_c, s);
            return;
          }
          kernels::cuda::gemm_strided_batched(C.dtype(), g.trans_a, g.trans_b, g.M, g.N, g.K, 1.0, A.raw_data(), lda,
                                              B.raw_data(), ldb, g.beta, C.raw_data(), ldc, g.batch, g.stride_a,
                                              g.stride_b, g.stride_c, s);
        });
  });
}

// ---- matmul, bmm ------------------------------------------------------------------------------------------

// One operand of the flat-batch product: its matrices as a contiguous (batch, rows, cols) tensor.
struct BatchOperand {
  Tensor mats;          // (1 or batch, rows, cols)
  bool shared = false;  // one matrix used by every entry of a batch of B != 1 (stride 0)
  Shape shape;          // the operand as given
  Shape matrix_shape;   // as a matrix stack: 1-D promoted to a row (left) or a column (right)
  bool needs_grad = false;
};

// `t` is the operand as given, or its rounded copy under autocast (which carries no grad flag: needs_grad says).
BatchOperand prepare_operand(const Tensor& t, bool needs_grad, bool left, const Shape& batch_shape) {
  BatchOperand op;
  op.shape = t.shape();
  op.needs_grad = needs_grad;
  Tensor m = t;
  if (t.dim() == 1) m = left ? t.unsqueeze(0) : t.unsqueeze(1);
  op.matrix_shape = m.shape();
  const int64_t rows = m.size(-2), cols = m.size(-1);
  const int64_t batch = shape_numel(batch_shape);
  const int64_t own_batch = shape_numel(Shape(m.shape().begin(), m.shape().end() - 2));
  if (own_batch == batch) {
    op.mats = m.contiguous().reshape({batch, rows, cols});
  } else if (own_batch == 1) {
    op.shared = true;
    op.mats = m.contiguous().reshape({1, rows, cols});
  } else {
    Shape full = batch_shape;
    full.insert(full.end(), {rows, cols});
    op.mats = m.expand(full).contiguous().reshape({batch, rows, cols});
  }
  op.mats = op.mats.detach();
  return op;
}

// A grad computed as (1 or batch, rows, cols) back to the operand's own shape: batch dims the operand was
// broadcast along are summed out.
Tensor operand_grad(const Tensor& g3, const BatchOperand& op, const Shape& batch_shape) {
  if (g3.numel() == shape_numel(op.shape)) return g3.reshape(op.shape);
  Shape full = batch_shape;
  full.insert(full.end(), op.matrix_shape.end() - 2, op.matrix_shape.end());
  return sum_to_shape(g3.reshape(full), op.matrix_shape).reshape(op.shape);
}

struct MatmulCtx {
  const char* name = "";
  BatchOperand a, b;  // a.mats saved only when b needs grad, and vice versa
  Shape batch_shape;
  int64_t batch = 0, M = 0, N = 0, K = 0;
  DType out_dtype = DType::f32;
  std::optional<DType> compute;  // autocast's bf16/f16, chosen in the forward
};

Tensor matmul_forward(MatmulCtx& ctx, const char* name, const Tensor& a, const Tensor& b) {
  check_float(name, a, "first operand");
  check_float(name, b, "second operand");
  check_compatible(name, {&a, &b});
  SHARDRT_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, name, ": operands must have rank >= 1, got ", a.str(),
                " and ", b.str());
  const int64_t K = a.size(-1);
  const int64_t Kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  SHARDRT_CHECK(K == Kb, ShapeError, name, ": inner dimensions differ: ", a.str(), " x ", b.str());
  const Shape a_batch(a.shape().begin(), a.shape().end() - std::min(a.dim(), 2));
  const Shape b_batch(b.shape().begin(), b.shape().end() - std::min(b.dim(), 2));
  ctx.name = name;
  ctx.batch_shape = broadcast_for(name, {a_batch, b_batch}, {&a, &b});
  ctx.batch = shape_numel(ctx.batch_shape);
  ctx.M = a.dim() == 1 ? 1 : a.size(-2);
  ctx.N = b.dim() == 1 ? 1 : b.size(-1);
  ctx.K = K;
  ctx.out_dtype = a.dtype();
  ctx.compute = autocast_compute({&a, &b});
  const auto operand = [&](const Tensor& t) {
    return ctx.compute ? round_operand(t, *ctx.compute, kernel_operand_form(t)) : t;
  };
  ctx.a = prepare_operand(operand(a), requires_grad(a), true, ctx.batch_shape);
  ctx.b = prepare_operand(operand(b), requires_grad(b), false, ctx.batch_shape);

  Tensor c = Tensor::empty({ctx.batch, ctx.M, ctx.N}, a.dtype(), a.device());
  Gemm g;
  g.N = ctx.N, g.K = K;
  g.lda = K, g.ldb = ctx.N, g.ldc = ctx.N;
  if (ctx.b.shared) {
    // The stacked left matrices form one (B * M) x K matrix: a single GEMM against the shared right operand.
    g.M = ctx.batch * ctx.M;
  } else {
    g.M = ctx.M;
    g.batch = ctx.batch;
    g.stride_a = ctx.a.shared ? 0 : ctx.M * K;
    g.stride_b = K * ctx.N;
    g.stride_c = ctx.M * ctx.N;
  }
  launch_gemm(name, g, ctx.a.mats, ctx.b.mats, c);

  Shape out_shape = ctx.batch_shape;
  if (a.dim() > 1) out_shape.push_back(ctx.M);
  if (b.dim() > 1) out_shape.push_back(ctx.N);
  // Each operand is needed only for the other's grad.
  if (!ctx.b.needs_grad) ctx.a.mats = Tensor();
  if (!ctx.a.needs_grad) ctx.b.mats = Tensor();
  return c.view(out_shape);
}

std::vector<Tensor> matmul_backward(MatmulCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const int64_t B = ctx.batch, M = ctx.M, N = ctx.N, K = ctx.K;
  Tensor gc = grad_outputs[0].contiguous().reshape({B, M, N});
  if (ctx.compute) gc = round_operand(gc, *ctx.compute, kernel_operand_form(gc));
  std::vector<Tensor> grads(2);
  if (ctx.a.needs_grad) {
    // dA[i] = dC[i] B[i]^T, computed for every batch entry and summed when A is shared.
    Tensor ga = Tensor::empty({B, M, K}, ctx.out_dtype, gc.device());
    Gemm g;
    g.trans_b = true;
    g.N = K, g.K = N;
    g.lda = N, g.ldb = N, g.ldc = K;
    if (ctx.b.shared) {
      g.M = B * M;  // one GEMM over the stacked rows, as in the forward
    } else {
      g.M = M;
      g.batch = B, g.stride_a = M * N, g.stride_b = K * N, g.stride_c = M * K;
    }
    launch_gemm(ctx.name, g, gc, ctx.b.mats, ga);
    if (ctx.a.shared) ga = sum_dim_keep(ga, 0);
    grads[0] = operand_grad(ga, ctx.a, ctx.batch_shape);
  }
  if (ctx.b.needs_grad) {
    Gemm g;
    g.trans_a = true;
    g.lda = K, g.ldb = N, g.ldc = N;
    Tensor gb;
    if (ctx.b.shared) {
      // dB = sum_i A[i]^T dC[i] = A_flat^T dC_flat over all B * M rows: one GEMM.
      gb = Tensor::empty({1, K, N}, ctx.out_dtype, gc.device());
      g.M = K, g.N = N, g.K = B * M;
    } else {
      // dB[i] = A[i]^T dC[i] (A shared: stride 0).
      gb = Tensor::empty({B, K, N}, ctx.out_dtype, gc.device());
      g.M = K, g.N = N, g.K = M;
      g.batch = B, g.stride_a = ctx.a.shared ? 0 : M * K, g.stride_b = M * N, g.stride_c = K * N;
    }
    launch_gemm(ctx.name, g, ctx.a.mats, gc, gb);
    grads[1] = operand_grad(gb, ctx.b, ctx.batch_shape);
  }
  return grads;
}

Tensor matmul_op(const char* name, const Tensor& a, const Tensor& b) {
  MatmulCtx ctx;
  Tensor c = matmul_forward(ctx, name, a, b);
  return record(name, {a, b}, c, std::move(ctx), matmul_backward);
}

// ---- linear -----------------------------------------------------------------------------------------------

struct LinearCtx {
  Tensor x2;      // (rows, in), saved when the weight needs grad
  Tensor weight;  // (out, in), saved when x needs grad
  Shape x_shape;
  int64_t rows = 0, in = 0, out = 0;
  bool x_needs_grad = false, weight_needs_grad = false, bias_needs_grad = false;
  DType out_dtype = DType::f32;
  std::optional<DType> compute;  // autocast's bf16/f16, chosen in the forward
};

// y = x W^T + b in one cuBLASLt GEMM with a bias epilogue, for f32 CUDA tensors (the bias is not written
// into y first and read back by the GEMM). False, with nothing queued, where cuBLASLt has no such algorithm.
bool linear_with_fused_bias(const LinearCtx& ctx, const Tensor& x2, const Tensor& w, const Tensor& bias,
                            const Tensor& y) {
  if (x2.device().is_cpu() || y.dtype() != DType::f32 || x2.dtype() != y.dtype()) return false;
  const Tensor b = bias.contiguous();
  bool done = false;
  on_device(
      y, [] {},
      [&](CudaStream stream) {
        done = kernels::cuda::gemm_lt(y.dtype(), false, true, ctx.rows, ctx.out, ctx.in, x2.raw_data(), ctx.in,
                                      w.raw_data(), ctx.in, y.raw_data(), ctx.out, kernels::cuda::LtEpilogue::bias,
                                      b.raw_data(), /*allow_tf32=*/false, stream);
      });
  return done;
}

Tensor linear_forward(LinearCtx& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_float("linear", x, "input");
  check_float("linear", weight, "weight");
  if (bias.defined()) check_float("linear", bias, "bias");
  check_compatible("linear", {&x, &weight, &bias});
  SHARDRT_CHECK(weight.dim() == 2, ShapeError, "linear: weight must be (out, in), got ", weight.str());
  SHARDRT_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), ShapeError, "linear: input ", x.str(),
                " does not end in the weight's in-features (weight ", weight.str(), ")");
  SHARDRT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), ShapeError,
                "linear: bias ", bias.str(), " does not match weight ", weight.str());
  ctx.x_shape = x.shape();
  ctx.in = weight.size(1);
  ctx.out = weight.size(0);
  ctx.rows = shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  ctx.x_needs_grad = requires_grad(x);
  ctx.weight_needs_grad = requires_grad(weight);
  ctx.bias_needs_grad = bias.defined() && requires_grad(bias);
  ctx.out_dtype = x.dtype();
  ctx.compute = autocast_compute({&x, &weight, &bias});
  Tensor x2 = x.contiguous().reshape({ctx.rows, ctx.in});
  Tensor w = weight.contiguous();
  if (ctx.compute) {
    x2 = round_operand(x2, *ctx.compute, kernel_operand_form(x2));
    w = round_operand(w, *ctx.compute, kernel_operand_form(w));
  }

  // y = x W^T + b: the bias rows are written first and the GEMM adds onto them (beta = 1).
  Tensor y = Tensor::empty({ctx.rows, ctx.out}, x.dtype(), x.device());
  Gemm g;
  g.trans_b = true;
  g.M = ctx.rows, g.N = ctx.out, g.K = ctx.in;
  g.lda = ctx.in, g.ldb = ctx.in, g.ldc = ctx.out;
  if (!bias.defined() || !linear_with_fused_bias(ctx, x2, w, bias, y)) {
    if (bias.defined()) {
      y.copy_(bias.expand({ctx.rows, ctx.out}));
      g.beta = 1.0;
    }
    launch_gemm("linear", g, x2, w, y);
  }

  if (ctx.weight_needs_grad) ctx.x2 = x2.detach();
  if (ctx.x_needs_grad) ctx.weight = w.detach();
  Shape y_shape = x.shape();
  y_shape.back() = ctx.out;
  return y.view(y_shape);
}

std::vector<Tensor> linear_backward(LinearCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  const Tensor gy = grad_outputs[0].contiguous().reshape({ctx.rows, ctx.out});
  // The grad GEMMs' dy: rounded under autocast (the bias grad sums the unrounded one).
  const Tensor gy_op = ctx.compute ? round_operand(gy, *ctx.compute, kernel_operand_form(gy)) : gy;
  std::vector<Tensor> grads(3);
  if (ctx.x_needs_grad) {
    // dx = dy W
    Tensor gx = Tensor::empty({ctx.rows, ctx.in}, ctx.out_dtype, gy.device());
    Gemm g;
    g.M = ctx.rows, g.N = ctx.in, g.K = ctx.out;
    g.lda = ctx.out, g.ldb = ctx.in, g.ldc = ctx.in;
    launch_gemm("linear", g, gy_op, ctx.weight, gx);
    grads[0] = gx.view(ctx.x_shape);
  }
  if (ctx.weight_needs_grad) {
    // dW = dy^T x, one GEMM over all leading dims of x flattened into rows.
    Tensor gw = Tensor::empty({ctx.out, ctx.in}, ctx.out_dtype, gy.device());
    Gemm g;
    g.trans_a = true;
    g.M = ctx.out, g.N = ctx.in, g.K = ctx.rows;
    g.lda = ctx.out, g.ldb = ctx.in, g.ldc = ctx.in;
    launch_gemm("linear", g, gy_op, ctx.x2, gw);
    grads[1] = gw;
  }
  if (ctx.bias_needs_grad) grads[2] = sum_dim_keep(gy, 0).reshape({ctx.out});
  return grads;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) { return matmul_op("matmul", a, b); }

Tensor bmm(const Tensor& a, const Tensor& b) {
  SHARDRT_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0), ShapeError,
                "bmm: expected (B, M, K) x (B, K, N), got ", a.str(), " x ", b.str());
  return matmul_op("bmm", a, b);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  LinearCtx ctx;
  Tensor y = linear_forward(ctx, x, weight, bias);
  return record("linear", {x, weight, bias}, y, std::move(ctx), linear_backward);
}

}  // namespace shardrt
