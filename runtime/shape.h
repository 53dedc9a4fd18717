// Shapes and strides: small helpers used by Tensor and by every op's validation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardrt {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
Strides contiguous_strides(const Shape& s);
// "[2, 3, 4]"
std::string shape_str(const Shape& s);
// Wraps a possibly negative dim into [0, ndim); throws ShapeError naming `op` when out of range.
int wrap_dim(int dim, int ndim, const char* op);
// NumPy broadcasting of two shapes; throws ShapeError naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace shardrt
