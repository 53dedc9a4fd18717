// Shapes and strides: small helpers used by Tensor and by every op's validation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace shardrt {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// Elements in `s`. Throws ShapeError naming `op` and the shape when a size is negative, or when the nonzero sizes
// multiply past int64: then the element count, or the contiguous strides of a shape that also has a 0, would
// wrap around and later index memory the tensor does not own.
int64_t shape_numel(const Shape& s, const char* op = "shape_numel");
// Bytes a contiguous tensor of shape `s` and `dtype` needs. ShapeError naming `op` when the shape is invalid as
// for shape_numel, or when the bytes do not fit in int64 (storage offsets are int64 byte counts).
int64_t shape_nbytes(const Shape& s, DType dtype, const char* op);
Strides contiguous_strides(const Shape& s);
// "[2, 3, 4]"
std::string shape_str(const Shape& s);
// Wraps a possibly negative dim into [0, ndim); throws ShapeError naming `op` when out of range.
int wrap_dim(int dim, int ndim, const char* op);
// NumPy broadcasting of two shapes; throws ShapeError naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace shardrt
