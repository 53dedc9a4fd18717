// Differentiable local ops. Each is implemented in autograd/ops/<family>.cpp as an explicit forward and
// backward pair (see function.h) calling kernels/. Every op validates dtypes, devices and shapes and throws a
// typed error naming the op and the shapes. Each family comment says where it runs: "(cpu, cuda)" has a kernel on
// both backends; "(cpu)" throws DeviceError("<op>: no CUDA kernel yet (input <tensor>)") on CUDA tensors. Nothing
// is copied to the host behind the caller's back. Float ops accept f32 and f64 (16-bit types: cast first with
// to_dtype).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace shardrt {

// ---- elementwise (ops/binary.cpp, ops/unary.cpp) (cpu, cuda) ----------------------------------------------
// NumPy broadcasting; grads of broadcast operands are summed back to their shapes.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);  // a > 0 where b's grad is needed
Tensor maximum(const Tensor& a, const Tensor& b);  // ties send the grad to a
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add_scalar(const Tensor& x, double s);
Tensor mul_scalar(const Tensor& x, double s);
Tensor pow_scalar(const Tensor& x, double p);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor clamp(const Tensor& x, double lo, double hi);
Tensor relu(const Tensor& x);
enum class GeluApprox { none, tanh };
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::none);
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// Comparisons give u8 (0/1) tensors and carry no grad; `where` routes grads to a or b by the condition.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// dtype cast; the grad is cast back to the input's dtype.
Tensor to_dtype(const Tensor& x, DType dtype);

// ---- reductions (ops/reduce.cpp, ops/softmax.cpp) (cpu, cuda) ---------------------------------------------
// `dims` empty = all dims. Negative dims allowed.
Tensor sum(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);  // grad to the first max
Tensor amin(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const std::vector<int>& dims, bool keepdim = false);
Tensor argmax(const Tensor& x, int dim, bool keepdim = false);  // i64, no grad
Tensor softmax(const Tensor& x, int dim);
Tensor log_softmax(const Tensor& x, int dim);

// ---- linear algebra (ops/matmul.cpp) (cpu, cuda) ---------------------------------------------------------
// NumPy matmul semantics for rank >= 1 with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// (B, M, K) x (B, K, N) -> (B, M, N)
Tensor bmm(const Tensor& a, const Tensor& b);
// y = x W^T + b over the last dim of x; W is (out, in); bias (out) may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- normalisation (ops/norm.cpp) (cpu, cuda) ------------------------------------------------------------
// Normalises over the trailing dims whose sizes are `normalized_shape`; weight/bias have that shape or are undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// x is (N, C, *spatial); weight/bias (C) or undefined.
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

// ---- attention (ops/attention.cpp) (cpu, cuda) -----------------------------------------------------------
struct AttentionOutput {
  Tensor out;  // (..., Nq, Dv)
  Tensor lse;  // (..., Nq): log-sum-exp of the scaled scores of each query row; differentiable
};
// q (..., Nq, D), k (..., Nk, D), v (..., Nk, Dv) with equal leading dims; softmax(scale q k^T) v, computed
// block by block (the Nq x Nk matrix is never formed).
AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale);

// ---- convolution, pooling, upsampling (ops/conv.cpp, ops/pool.cpp, ops/upsample.cpp) (cpu, cuda) ----------
// On CUDA, convolutions run through cuDNN (kernels/cuda/conv.h).
// x (B, Cin, *spatial) with 1-3 spatial dims; w (Cout, Cin, *kernel); bias (Cout) or undefined.
// stride/padding/dilation have one entry per spatial dim (or one entry used for all).
Tensor conv(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride = {1},
            const std::vector<int64_t>& padding = {0}, const std::vector<int64_t>& dilation = {1});
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(), int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1);
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(), int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1);
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(), int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1);
// Transposed convolution with kernel == stride and no padding (patch "unpatchify"); w (Cin, Cout, *kernel).
Tensor conv_transpose(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor());
Tensor avg_pool(const Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride = {},
                const std::vector<int64_t>& padding = {0});  // empty stride = kernel
Tensor max_pool(const Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride = {},
                const std::vector<int64_t>& padding = {0});
Tensor upsample_nearest(const Tensor& x, const std::vector<int64_t>& out_size);
// linear / bilinear / trilinear by the number of spatial dims
Tensor upsample_linear(const Tensor& x, const std::vector<int64_t>& out_size, bool align_corners = false);

// ---- shape and indexing (ops/shape.cpp, ops/index.cpp) ----------------------------------------------------
// Views, contiguous, cat and split: (cpu, cuda), through the runtime's copies. pad, index_select, gather and
// scatter_add: (cpu, cuda); a CUDA index is copied to the host once to check its values, and the CUDA scatters are
// deterministic (kernels/cuda/index.h).
// Differentiable versions of the Tensor view methods (outputs are views where the Tensor method gives one).
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor view(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const std::vector<int>& dims);
Tensor transpose(const Tensor& x, int d0, int d1);
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int dim, int64_t index);
Tensor unsqueeze(const Tensor& x, int dim);
Tensor squeeze(const Tensor& x, int dim);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor contiguous(const Tensor& x);
Tensor cat(const std::vector<Tensor>& xs, int dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim);
enum class PadMode { constant, reflect, replicate, circular };
// `pads` lists (before, after) pairs starting from the LAST dim, like torch.nn.functional.pad; 1-3 dims padded.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode = PadMode::constant, double value = 0.0);
// index is 1-D i64; out has index.numel() entries along dim.
Tensor index_select(const Tensor& x, int dim, const Tensor& index);
// torch.gather: index (i64) has x's rank; out[i][j][k] = x[i][index[i][j][k]][k] for dim 1.
Tensor gather(const Tensor& x, int dim, const Tensor& index);
// out = x with src's rows added at index along dim (the adjoint of gather); differentiable in x and src.
Tensor scatter_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src);

// ---- losses (ops/loss.cpp) (cpu, cuda: composed of elementwise and reduction ops) ------------------------
Tensor mse_loss(const Tensor& pred, const Tensor& target);  // mean of squared differences
// logits (N, C), targets (N) i64 in [0, C); mean over N.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);
// ||pred - target||_2 / ||target||_2 over all elements.
Tensor relative_l2_loss(const Tensor& pred, const Tensor& target);

}  // namespace shardrt
