#include "runtime/shape.h"

#include <algorithm>

#include "runtime/errors.h"

namespace shardrt {

int64_t shape_numel(const Shape& s, const char* op) {
  for (int64_t d : s) SHARDRT_CHECK(d >= 0, ShapeError, op, ": negative size in shape ", shape_str(s));
  const bool has_zero = std::find(s.begin(), s.end(), 0) != s.end();
  int64_t nonzero_product = 1;
  for (int64_t d : s) {
    if (d != 0 && __builtin_mul_overflow(nonzero_product, d, &nonzero_product))
      throw ShapeError(detail::concat(op, ": shape ", shape_str(s),
                                      has_zero ? " has nonzero sizes whose product exceeds 2^63 - 1, so its strides "
                                                 "overflow"
                                               : " has more than 2^63 - 1 elements"));
  }
  return has_zero ? 0 : nonzero_product;
}

int64_t shape_nbytes(const Shape& s, DType dtype, const char* op) {
  const int64_t numel = shape_numel(s, op);
  const auto itemsize = static_cast<int64_t>(dtype_size(dtype));
  int64_t bytes = 0;
  SHARDRT_CHECK(!__builtin_mul_overflow(numel, itemsize, &bytes), ShapeError, op, ": shape ", shape_str(s), " of ",
                dtype_name(dtype), " needs more than 2^63 - 1 bytes (", numel, " elements of ", itemsize, " bytes)");
  return bytes;
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int wrap_dim(int dim, int ndim, const char* op) {
  int d = dim < 0 ? dim + ndim : dim;
  SHARDRT_CHECK(d >= 0 && d < ndim, ShapeError, op, ": dim ", dim, " out of range for a tensor of rank ", ndim);
  return d;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    SHARDRT_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                  " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  // Two valid shapes can broadcast to one with more elements than int64 counts ([2^32, 1] with [1, 2^32]).
  shape_numel(out, op);
  return out;
}

}  // namespace shardrt
