#include "models/concrete_dropout.h"

#include <cmath>
#include <vector>

#include "autograd/function.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt::models {

namespace {

struct ConcreteCtx {
  std::vector<double> x, m, p;  // the input, the mask and σ(λ), per element
  double temperature = 0, eps = 0;
  Shape shape;
  DType dtype = DType::f64;
  Device device = Device::cpu();
};

std::vector<double> host_values(const Tensor& t) { return t.detach().to(Device::cpu()).to(DType::f64).to_vector(); }
double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

Tensor concrete_forward(ConcreteCtx& ctx, const Tensor& x, const Tensor& lambda, const Tensor& u, double temperature,
                        double eps) {
  SHARDRT_CHECK(x.shape() == lambda.shape() && x.shape() == u.shape(), ShapeError, "concrete_dropout: x ", x.str(),
                ", p_logit ", lambda.str(), " and u ", u.str(), " must have one shape");
  SHARDRT_CHECK(is_floating(x.dtype()) && x.dtype() == lambda.dtype() && x.dtype() == u.dtype(), DTypeError,
                "concrete_dropout: x ", x.str(), ", p_logit ", lambda.str(), " and u ", u.str(),
                " must share a float dtype");
  SHARDRT_CHECK(temperature > 0, ValueError, "concrete_dropout: the temperature must be > 0, got ", temperature);
  ctx.x = host_values(x);
  const std::vector<double> l = host_values(lambda), uv = host_values(u);
  ctx.temperature = temperature, ctx.eps = eps, ctx.shape = x.shape(), ctx.dtype = x.dtype(), ctx.device = x.device();
  const size_t n = ctx.x.size();
  ctx.m.resize(n), ctx.p.resize(n);
  std::vector<double> y(n);
  for (size_t i = 0; i < n; ++i) {
    const double logit_u = std::log(uv[i]) - std::log(1.0 - uv[i]);
    ctx.m[i] = sigmoid((logit_u + l[i]) / temperature);
    ctx.p[i] = sigmoid(l[i]);
    y[i] = ctx.x[i] * (1.0 - ctx.m[i]) / (1.0 - ctx.p[i] + eps);
  }
  return from_vector(y, ctx.shape, {ctx.dtype}).to(ctx.device);
}

std::vector<Tensor> concrete_backward(ConcreteCtx& ctx, const std::vector<Tensor>& grads) {
  const std::vector<double> dy = host_values(grads[0]);
  const size_t n = dy.size();
  std::vector<double> dx(n), dl(n);
  for (size_t i = 0; i < n; ++i) {
    const double m = ctx.m[i], p = ctx.p[i], d = 1.0 - p + ctx.eps;
    dx[i] = dy[i] * (1.0 - m) / d;
    dl[i] = dy[i] * ctx.x[i] * (-m * (1.0 - m) / (ctx.temperature * d) + (1.0 - m) * p * (1.0 - p) / (d * d));
  }
  return {from_vector(dx, ctx.shape, {ctx.dtype}).to(ctx.device),
          from_vector(dl, ctx.shape, {ctx.dtype}).to(ctx.device), Tensor()};
}

}  // namespace

Tensor concrete_dropout(const Tensor& x, const Tensor& p_logit, const Tensor& u, double temperature, double eps) {
  ConcreteCtx ctx;
  Tensor y = concrete_forward(ctx, x, p_logit, u, temperature, eps);
  return record("concrete_dropout", {x, p_logit, u}, std::move(y), std::move(ctx), concrete_backward);
}

}  // namespace shardrt::models
