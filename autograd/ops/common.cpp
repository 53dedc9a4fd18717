#include "autograd/ops/common.h"

#include <algorithm>
#include <string>

#include "autograd/autocast.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cuda/reduce.h"
#include "runtime/factories.h"

namespace shardrt::ops_detail {

void check_float(const char* op, const Tensor& t, const char* what) {
  SHARDRT_CHECK(t.defined(), ValueError, op, ": ", what, " is undefined");
  SHARDRT_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, DTypeError, op, ": ", what,
                " must be f32 or f64, got ", t.str());
}

Tensor shape_stand_in(const Shape& shape, DType dtype, Device device) {
  return Tensor::empty({}, dtype, device).expand(shape);
}

void check_compatible(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    check_same_dtype(op, *first, *t);
    check_same_device(op, *first, *t);
  }
}

std::optional<DType> autocast_compute(std::initializer_list<const Tensor*> inputs) {
  const std::optional<DType> compute = autocast_dtype();
  if (!compute) return std::nullopt;
  for (const Tensor* t : inputs)
    if (t->defined() && t->dtype() != DType::f32) return std::nullopt;
  return compute;
}

OperandForm kernel_operand_form(const Tensor& t) {
  return t.device().is_cpu() ? OperandForm::f32_rounded : OperandForm::sixteen_bit;
}

Tensor round_operand(const Tensor& t, DType compute, OperandForm form) {
  SHARDRT_CHECK(t.dtype() == DType::f32, DTypeError, "autocast: only f32 operands are rounded, got ", t.str());
  // Tensor::to converts with round to nearest even on both devices (runtime/copy.h); widening back is exact.
  const Tensor narrow16 = t.to(compute);
  return (form == OperandForm::sixteen_bit ? narrow16 : narrow16.to(DType::f32)).contiguous().detach();
}

void cpu_kernel_only(const char* op, const Tensor& t, const char* what) {
  SHARDRT_CHECK(!t.device().is_cuda(), DeviceError, op, ": no CUDA kernel yet (", what, " ", t.str(), ")");
}

int wrap_dim_of(const char* op, int dim, const Tensor& t) {
  SHARDRT_CHECK(dim >= -t.dim() && dim < t.dim(), ShapeError, op, ": dim ", dim, " is out of range for ", t.str());
  return dim < 0 ? dim + t.dim() : dim;
}

Shape broadcast_for(const char* op, const std::vector<Shape>& shapes, std::initializer_list<const Tensor*> operands) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  bool ok = true;
  for (const Shape& s : shapes) {
    const size_t lead = rank - s.size();
    for (size_t d = 0; d < s.size(); ++d) {
      if (s[d] == out[lead + d] || s[d] == 1) continue;
      ok = ok && out[lead + d] == 1;
      out[lead + d] = s[d];
    }
  }
  if (!ok) {
    std::string names;
    for (const Tensor* t : operands) names += (names.empty() ? "" : ", ") + t->str();
    throw ShapeError(detail::concat(op, ": operands do not broadcast: ", names));
  }
  return out;
}

DimView dim_view(const Shape& shape, int dim) {
  DimView v;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (i < dim) v.outer *= shape[i];
    else if (i == dim) v.n = shape[i];
    else v.inner *= shape[i];
  }
  return v;
}

Tensor sum_dim_keep(const Tensor& x_in, int dim) {
  Tensor x = x_in.contiguous();
  Shape out_shape = x.shape();
  out_shape[dim] = 1;
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  DimView v = dim_view(x.shape(), dim);
  dispatch_float("sum", x, [&](auto tag) {
    using T = decltype(tag);
    on_device(
        x, [&] { kernels::cpu::reduce_sum<T>(v.outer, v.n, v.inner, x.data<T>(), y.data<T>()); },
        [&](CudaStream s) { kernels::cuda::reduce_sum<T>(v.outer, v.n, v.inner, x.data<T>(), y.data<T>(), s); });
  });
  return y;
}

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

Tensor scalar_like(const Tensor& t, double value) { return full({}, value, {t.dtype(), t.device()}); }

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  SHARDRT_CHECK(g.dim() >= static_cast<int>(shape.size()), ShapeError, "sum_to_shape: cannot reduce ", g.str(), " to ",
                shape_str(shape));
  Tensor r = g;
  int lead = g.dim() - static_cast<int>(shape.size());
  for (int d = g.dim() - 1; d >= 0; --d) {
    bool extra = d < lead;
    bool broadcast = !extra && shape[d - lead] == 1 && g.shape()[d] != 1;
    SHARDRT_CHECK(extra || broadcast || shape[d - lead] == g.shape()[d], ShapeError, "sum_to_shape: cannot reduce ",
                  g.str(), " to ", shape_str(shape));
    if (extra || broadcast) r = sum_dim_keep(r, d);
  }
  return r.reshape(shape);
}

int spatial_dims(const char* op, const Tensor& x) {
  SHARDRT_CHECK(x.dim() >= 3 && x.dim() <= 5, ShapeError, op, ": expected (B, C, *spatial) with 1-3 spatial dims, got ",
                x.str());
  return x.dim() - 2;
}

std::vector<int64_t> per_spatial_dim(const char* op, const char* what, const std::vector<int64_t>& values, int nd,
                                     int64_t min_value) {
  SHARDRT_CHECK(values.size() == 1 || static_cast<int>(values.size()) == nd, ValueError, op, ": ", what,
                " needs 1 or ", nd, " entries for ", nd, " spatial dims, got ", shape_str(values));
  std::vector<int64_t> expanded(nd, values[0]);
  if (values.size() > 1) expanded = values;
  for (int64_t v : expanded)
    SHARDRT_CHECK(v >= min_value, ValueError, op, ": ", what, " ", shape_str(values), " has an entry below ",
                  min_value);
  return expanded;
}

}  // namespace shardrt::ops_detail
