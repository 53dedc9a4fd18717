// Reductions: sum, mean, amax, amin, logsumexp over any set of dims, and argmax over one dim.
//
// The kernels reduce the middle axis of an (outer, n, inner) contiguous view. When the reduced dims are adjacent
// (one dim, or a run like {1, 2}) x is used as it is; otherwise the kept dims are permuted to the front and the
// reduced dims to the back, made contiguous, and reduced with inner = 1.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/ops/common.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cuda/reduce.h"

namespace shardrt {

using namespace ops_detail;

namespace {

// ---- layout of a reduction ----------------------------------------------------------------------------------

struct ReducePlan {
  Shape in_shape;
  std::vector<int> perm;  // empty when the reduced dims are adjacent and no permutation is needed
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;   // keepdim = false
  Shape kept_shape;  // keepdim = true: reduced dims have size 1
};

ReducePlan plan_reduction(const char* op, const Tensor& x, const std::vector<int>& dims_in) {
  const int ndim = x.dim();
  std::vector<bool> reduced(ndim, dims_in.empty());
  for (int d : dims_in) {
    const int w = wrap_dim_of(op, d, x);
    SHARDRT_CHECK(!reduced[w], ShapeError, op, ": dim ", d, " given twice for ", x.str());
    reduced[w] = true;
  }
  ReducePlan p;
  p.in_shape = x.shape();
  std::vector<int> kept_dims, reduced_dims;
  for (int d = 0; d < ndim; ++d) {
    (reduced[d] ? reduced_dims : kept_dims).push_back(d);
    if (reduced[d]) {
      p.n *= x.size(d);
      p.kept_shape.push_back(1);
    } else {
      p.out_shape.push_back(x.size(d));
      p.kept_shape.push_back(x.size(d));
    }
  }
  const bool adjacent = reduced_dims.empty() || reduced_dims.back() - reduced_dims.front() + 1 ==
                                                    static_cast<int>(reduced_dims.size());
  if (adjacent) {
    const int first = reduced_dims.empty() ? ndim : reduced_dims.front();
    for (int d = 0; d < ndim; ++d) {
      if (d < first) p.outer *= x.size(d);
      else if (!reduced[d]) p.inner *= x.size(d);
    }
  } else {
    p.perm = kept_dims;
    p.perm.insert(p.perm.end(), reduced_dims.begin(), reduced_dims.end());
    p.outer = shape_numel(p.out_shape);
  }
  return p;
}

// x as the contiguous (outer, n, inner) buffer the kernels read.
Tensor arrange(const Tensor& x, const ReducePlan& p) {
  return p.perm.empty() ? x.contiguous() : x.permute(p.perm).contiguous();
}

// An uninitialised grad in the arranged layout.
Tensor empty_arranged(const Tensor& like, const ReducePlan& p) {
  Shape shape = p.in_shape;
  if (!p.perm.empty())
    for (size_t i = 0; i < p.perm.size(); ++i) shape[i] = p.in_shape[p.perm[i]];
  return Tensor::empty(shape, like.dtype(), like.device());
}

// The inverse of arrange for a grad computed in the arranged layout.
Tensor unarrange(const Tensor& g, const ReducePlan& p) {
  if (p.perm.empty()) return g;
  std::vector<int> inverse(p.perm.size());
  for (size_t i = 0; i < p.perm.size(); ++i) inverse[p.perm[i]] = static_cast<int>(i);
  return g.permute(inverse).contiguous();
}

// The reduced result as the op returns it.
Tensor shape_result(const Tensor& y, const ReducePlan& p, bool keepdim) {
  return y.view(keepdim ? p.kept_shape : p.out_shape);
}

// A grad of the reduced result broadcast back over x's shape.
Tensor broadcast_grad(const Tensor& g, const ReducePlan& p) {
  return g.reshape(p.kept_shape).expand(p.in_shape).contiguous();
}

// ---- launchers -------------------------------------------------------------------------------------------------

enum class Reduction { sum, mean, max, min, logsumexp };

// y (outer * inner) = reduction of the arranged x; idx is written for max/min.
void launch_reduce(const char* name, Reduction r, const ReducePlan& p, const Tensor& x, const Tensor& y,
                   int64_t* idx) {
  dispatch_float(name, x, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    on_device(
        x,
        [&] {
          namespace k = kernels::cpu;
          switch (r) {
            case Reduction::sum: k::reduce_sum<T>(p.outer, p.n, p.inner, xp, yp); break;
            case Reduction::mean: k::reduce_mean<T>(p.outer, p.n, p.inner, xp, yp); break;
            case Reduction::max: k::reduce_max<T>(p.outer, p.n, p.inner, xp, yp, idx); break;
            case Reduction::min: k::reduce_min<T>(p.outer, p.n, p.inner, xp, yp, idx); break;
            case Reduction::logsumexp: k::reduce_logsumexp<T>(p.outer, p.n, p.inner, xp, yp); break;
          }
        },
        [&](CudaStream s) {
          namespace k = kernels::cuda;
          switch (r) {
            case Reduction::sum: k::reduce_sum<T>(p.outer, p.n, p.inner, xp, yp, s); break;
            case Reduction::mean: k::reduce_mean<T>(p.outer, p.n, p.inner, xp, yp, s); break;
            case Reduction::max: k::reduce_max<T>(p.outer, p.n, p.inner, xp, yp, idx, s); break;
            case Reduction::min: k::reduce_min<T>(p.outer, p.n, p.inner, xp, yp, idx, s); break;
            case Reduction::logsumexp: k::reduce_logsumexp<T>(p.outer, p.n, p.inner, xp, yp, s); break;
          }
        });
  });
}

void launch_index_backward(const char* name, const ReducePlan& p, const Tensor& idx, const Tensor& gy,
                           const Tensor& gx) {
  dispatch_float(name, gy, [&](auto tag) {
    using T = decltype(tag);
    const int64_t* ip = idx.data<int64_t>();
    on_device(
        gy, [&] { kernels::cpu::reduce_index_backward<T>(p.outer, p.n, p.inner, ip, gy.data<T>(), gx.data<T>()); },
        [&](CudaStream s) {
          kernels::cuda::reduce_index_backward<T>(p.outer, p.n, p.inner, ip, gy.data<T>(), gx.data<T>(), s);
        });
  });
}

void launch_logsumexp_backward(const ReducePlan& p, const Tensor& x, const Tensor& y, const Tensor& gy,
                               const Tensor& gx) {
  dispatch_float("logsumexp", gy, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        gy,
        [&] {
          kernels::cpu::reduce_logsumexp_backward<T>(p.outer, p.n, p.inner, x.data<T>(), y.data<T>(), gy.data<T>(),
                                                     gx.data<T>());
        },
        [&](CudaStream s) {
          kernels::cuda::reduce_logsumexp_backward<T>(p.outer, p.n, p.inner, x.data<T>(), y.data<T>(), gy.data<T>(),
                                                      gx.data<T>(), s);
        });
  });
}

// ---- sum, mean ---------------------------------------------------------------------------------------------

struct SumCtx {
  ReducePlan plan;
  bool mean = false;
};

Tensor sum_forward(SumCtx& ctx, const char* name, const Tensor& x, const std::vector<int>& dims, bool keepdim,
                   bool mean) {
  check_float(name, x, "input");
  ctx.plan = plan_reduction(name, x, dims);
  ctx.mean = mean;
  Tensor y = Tensor::empty({ctx.plan.outer * ctx.plan.inner}, x.dtype(), x.device());
  launch_reduce(name, mean ? Reduction::mean : Reduction::sum, ctx.plan, arrange(x, ctx.plan), y, nullptr);
  return shape_result(y, ctx.plan, keepdim);
}

std::vector<Tensor> sum_backward(SumCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor g = grad_outputs[0];
  if (ctx.mean) g = mul_scalar(g, 1.0 / static_cast<double>(ctx.plan.n));
  return {broadcast_grad(g, ctx.plan)};
}

Tensor sum_op(const char* name, const Tensor& x, const std::vector<int>& dims, bool keepdim, bool mean) {
  SumCtx ctx;
  Tensor y = sum_forward(ctx, name, x, dims, keepdim, mean);
  return record(name, {x}, y, std::move(ctx), sum_backward);
}

// ---- amax, amin --------------------------------------------------------------------------------------------

struct ExtremumCtx {
  const char* name = "";
  ReducePlan plan;
  Tensor idx;  // i64 (outer * inner): where in the reduced run each result came from
};

Tensor extremum_forward(ExtremumCtx& ctx, const char* name, Reduction r, const Tensor& x,
                        const std::vector<int>& dims, bool keepdim) {
  check_float(name, x, "input");
  ctx.name = name;
  ctx.plan = plan_reduction(name, x, dims);
  SHARDRT_CHECK(ctx.plan.n > 0, ShapeError, name, ": cannot reduce over an empty dimension of ", x.str());
  Tensor y = Tensor::empty({ctx.plan.outer * ctx.plan.inner}, x.dtype(), x.device());
  ctx.idx = Tensor::empty(y.shape(), DType::i64, x.device());
  launch_reduce(name, r, ctx.plan, arrange(x, ctx.plan), y, ctx.idx.data<int64_t>());
  return shape_result(y, ctx.plan, keepdim);
}

std::vector<Tensor> extremum_backward(ExtremumCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = empty_arranged(gy, ctx.plan);
  launch_index_backward(ctx.name, ctx.plan, ctx.idx, gy, gx);
  return {unarrange(gx, ctx.plan)};
}

Tensor extremum_op(const char* name, Reduction r, const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  ExtremumCtx ctx;
  Tensor y = extremum_forward(ctx, name, r, x, dims, keepdim);
  return record(name, {x}, y, std::move(ctx), extremum_backward);
}

// ---- logsumexp ---------------------------------------------------------------------------------------------

struct LogsumexpCtx {
  ReducePlan plan;
  Tensor x, y;  // arranged x and the flat result
};

Tensor logsumexp_forward(LogsumexpCtx& ctx, const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  check_float("logsumexp", x, "input");
  ctx.plan = plan_reduction("logsumexp", x, dims);
  ctx.x = arrange(x, ctx.plan).detach();
  ctx.y = Tensor::empty({ctx.plan.outer * ctx.plan.inner}, x.dtype(), x.device());
  launch_reduce("logsumexp", Reduction::logsumexp, ctx.plan, ctx.x, ctx.y, nullptr);
  return shape_result(ctx.y, ctx.plan, keepdim);
}

std::vector<Tensor> logsumexp_backward(LogsumexpCtx& ctx, const std::vector<Tensor>& grad_outputs) {
  Tensor gy = grad_outputs[0].contiguous();
  Tensor gx = empty_arranged(gy, ctx.plan);
  launch_logsumexp_backward(ctx.plan, ctx.x, ctx.y, gy, gx);
  return {unarrange(gx, ctx.plan)};
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return sum_op("sum", x, dims, keepdim, false);
}
Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return sum_op("mean", x, dims, keepdim, true);
}
Tensor amax(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return extremum_op("amax", Reduction::max, x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return extremum_op("amin", Reduction::min, x, dims, keepdim);
}

Tensor logsumexp(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  LogsumexpCtx ctx;
  Tensor y = logsumexp_forward(ctx, x, dims, keepdim);
  return record("logsumexp", {x}, y, std::move(ctx), logsumexp_backward);
}

Tensor argmax(const Tensor& x, int dim, bool keepdim) {
  check_float("argmax", x, "input");
  ReducePlan p = plan_reduction("argmax", x, {dim});
  SHARDRT_CHECK(p.n > 0, ShapeError, "argmax: cannot reduce over the empty dim ", dim, " of ", x.str());
  Tensor xc = x.contiguous();
  Tensor idx = Tensor::empty({p.outer * p.inner}, DType::i64, x.device());
  dispatch_float("argmax", x, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        x, [&] { kernels::cpu::reduce_argmax<T>(p.outer, p.n, p.inner, xc.data<T>(), idx.data<int64_t>()); },
        [&](CudaStream s) {
          kernels::cuda::reduce_argmax<T>(p.outer, p.n, p.inner, xc.data<T>(), idx.data<int64_t>(), s);
        });
  });
  return shape_result(idx, p, keepdim);
}

}  // namespace shardrt
