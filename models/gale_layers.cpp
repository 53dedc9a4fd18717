#include "models/gale_layers.h"

#include <algorithm>
#include <cmath>

#include "autograd/tape.h"
#include "models/concrete_dropout.h"
#include "models/init.h"
#include "models/noise_window.h"
#include "runtime/errors.h"

namespace shardrt::models {

TokenProjection::TokenProjection(int64_t in, int64_t out, std::optional<std::vector<int64_t>> g, DType dtype)
    : in_features(in), out_features(out), grid(std::move(g)) {
  Shape w = {out, in};
  if (grid)
    for (size_t i = 0; i < grid->size(); ++i) w.push_back(3);
  weight = zeros(w, {dtype});
  bias = zeros({out}, {dtype});
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

ShardTensor TokenProjection::forward(const ShardTensor& x) const {
  if (!grid) return linear(x, weight, bias);
  const Shape& s = x.global_shape();
  const int nd = static_cast<int>(grid->size());
  // (B, N, C) -> (B, *grid, C) -> (B, C, *grid): the token split becomes a row split (reshape divides the extents).
  Shape spatial = {s[0]};
  for (int64_t e : *grid) spatial.push_back(e);
  spatial.push_back(s[2]);
  std::vector<int> to_channels_first = {0, nd + 1}, to_channels_last = {0};
  for (int i = 0; i < nd; ++i) to_channels_first.push_back(i + 1), to_channels_last.push_back(i + 2);
  to_channels_last.push_back(1);
  const ShardTensor g = permute(reshape(x, spatial), to_channels_first);
  const std::vector<int64_t> ones(static_cast<size_t>(nd), 1);
  const ShardTensor y = conv(g, weight, bias, ones, ones, ones);
  return reshape(permute(y, to_channels_last), {s[0], s[1], out_features});
}

void TokenProjection::init_torch_default(Generator& gen) {
  NoGradGuard no_grad;
  const int64_t fan_in = weight.size(0) > 0 ? weight.numel() / weight.size(0) : 0;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  weight.copy_(uniform_init(weight.shape(), bound, weight.dtype(), gen));
  bias.copy_(uniform_init(bias.shape(), bound, bias.dtype(), gen));
}

ConcreteDropout::ConcreteDropout(double dropout, DType dtype) {
  const double p0 = std::clamp(std::max(dropout, 0.05), 0.01, 0.99);
  p_logit = full({}, std::log(p0 / (1.0 - p0)), {dtype});
  register_parameter("p_logit", &p_logit);
}

ShardTensor ConcreteDropout::forward(const ShardTensor& x, GumbelState& noise) const {
  if (!training()) return x;
  Tensor u;
  {
    NoGradGuard no_grad;
    Tensor p = p_logit;  // PhysicsNeMo clamps the parameter itself (p_logit.data.clamp_), outside the graph
    if (std::fabs(p.item()) > 10.0) p.copy_(clamp(p, -10.0, 10.0));
    const uint64_t offset = (noise.dropout_step << 20) + static_cast<uint64_t>(noise.dropout_call++);
    u = clamp(uniform_window(x, noise.dropout_seed, offset), kConcreteEps, 1.0 - kConcreteEps);
  }
  const Tensor pl = p_logit.dtype() == x.dtype() ? p_logit : shardrt::to_dtype(p_logit, x.dtype());
  // p_logit per element of x, through the elementwise patch (its backward sums the grad where x is sharded).
  const ShardTensor lambda = add(ShardTensor(zeros(x.local().shape(), {x.dtype(), x.device()}), x.spec()), pl);
  return ShardTensor(concrete_dropout(x.local(), lambda.local(), u), x.spec());
}

Tensor orthogonal_init(const Shape& shape, DType dtype, Generator& gen) {
  // torch: flatten to (rows, cols), QR of a Gaussian of the taller orientation, Q's columns signed by diag(R).
  const int64_t rows = shape[0];
  int64_t c = 1;
  for (size_t i = 1; i < shape.size(); ++i) c *= shape[i];
  const bool tall = rows >= c;
  const int64_t m = tall ? rows : c, n = tall ? c : rows;
  std::vector<double> a = randn({m, n}, {DType::f64}, &gen).to_vector();  // m x n, row-major
  // Modified Gram-Schmidt on the columns: Q's columns; R's diagonal signs are the norms' (positive), which is the
  // sign fix torch applies (Q * sign(diag(R))).
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += a[i * n + j] * a[i * n + k];
      for (int64_t i = 0; i < m; ++i) a[i * n + j] -= dot * a[i * n + k];
    }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += a[i * n + j] * a[i * n + j];
    norm = std::sqrt(norm);
    for (int64_t i = 0; i < m; ++i) a[i * n + j] /= norm > 0 ? norm : 1.0;
  }
  std::vector<double> out(static_cast<size_t>(rows * c));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < c; ++k) out[r * c + k] = tall ? a[r * n + k] : a[k * n + r];
  return from_vector(out, shape, {dtype});
}

}  // namespace shardrt::models
