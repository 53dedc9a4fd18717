#include "models/cos_sin.h"

#include <cmath>
#include <vector>

#include "autograd/function.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt::models {

namespace {

struct CosSinCtx {
  std::vector<double> t, f;
  DType dtype = DType::f64;
  Device device = Device::cpu();
};

std::vector<double> host_values(const Tensor& x) { return x.detach().to(Device::cpu()).to(DType::f64).to_vector(); }

Tensor cos_sin_forward(CosSinCtx& ctx, const Tensor& t, const Tensor& freqs) {
  SHARDRT_CHECK(t.dim() == 1 && freqs.dim() == 1, ShapeError, "cos_sin_embedding: t ", t.str(), " and freqs ",
                freqs.str(), " must be 1-D");
  SHARDRT_CHECK(is_floating(t.dtype()) && t.dtype() == freqs.dtype(), DTypeError, "cos_sin_embedding: t ", t.str(),
                " and freqs ", freqs.str(), " must share a float dtype");
  ctx.t = host_values(t), ctx.f = host_values(freqs);
  ctx.dtype = t.dtype(), ctx.device = t.device();
  const int64_t b = t.size(0), k = freqs.size(0);
  std::vector<double> y(static_cast<size_t>(b * 2 * k));
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const double a = ctx.t[i] * ctx.f[j];
      y[i * 2 * k + j] = std::cos(a);
      y[i * 2 * k + k + j] = std::sin(a);
    }
  return from_vector(y, {b, 2 * k}, {ctx.dtype}).to(ctx.device);
}

std::vector<Tensor> cos_sin_backward(CosSinCtx& ctx, const std::vector<Tensor>& grads) {
  const int64_t b = static_cast<int64_t>(ctx.t.size()), k = static_cast<int64_t>(ctx.f.size());
  const std::vector<double> dy = host_values(grads[0]);
  std::vector<double> dt(static_cast<size_t>(b), 0.0), df(static_cast<size_t>(k), 0.0);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const double a = ctx.t[i] * ctx.f[j];
      const double r = -std::sin(a) * dy[i * 2 * k + j] + std::cos(a) * dy[i * 2 * k + k + j];
      dt[i] += ctx.f[j] * r;
      df[j] += ctx.t[i] * r;
    }
  return {from_vector(dt, {b}, {ctx.dtype}).to(ctx.device), from_vector(df, {k}, {ctx.dtype}).to(ctx.device)};
}

}  // namespace

Tensor cos_sin_embedding(const Tensor& t, const Tensor& freqs) {
  CosSinCtx ctx;
  Tensor y = cos_sin_forward(ctx, t, freqs);
  return record("cos_sin_embedding", {t, freqs}, std::move(y), std::move(ctx), cos_sin_backward);
}

}  // namespace shardrt::models
