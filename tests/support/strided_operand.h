// Strided, possibly broadcast (stride 0) or reversed (negative stride) inputs for the kernels that take explicit
// strides (binary, compare, where), on the host; the reference reads them element by element.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "tests/support/compare.h"

namespace shardrt::test {

inline int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Element offset of flat row-major index i of `shape` in an operand with `strides`.
inline int64_t strided_offset(int64_t i, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

// A strided input: `data` holds every element the strides can reach, and `base` is where index 0 lies (past the
// start when a stride is negative).
struct Operand {
  Vec data;
  std::vector<int64_t> strides;
  int64_t base = 0;
  double at(int64_t flat, const std::vector<int64_t>& shape) const {
    return data[base + strided_offset(flat, shape, strides)];
  }
};

// An operand of `shape` with `strides` whose elements are left empty (sized for what the strides reach).
inline Operand strided_layout(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  Operand op;
  op.strides = strides;
  int64_t span = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) continue;
    span += (shape[d] - 1) * std::abs(strides[d]);
    if (strides[d] < 0) op.base += (shape[d] - 1) * -strides[d];
  }
  op.data.resize(static_cast<size_t>(span));
  return op;
}

// Elements drawn from `pool` (for ties and special values).
inline Operand make_operand(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, const Vec& pool,
                            uint64_t seed) {
  Operand op = strided_layout(shape, strides);
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  for (double& e : op.data) e = pool[pick(gen)];
  return op;
}

// Elements uniform in [lo, hi].
inline Operand make_operand(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, double lo,
                            double hi, uint64_t seed) {
  Operand op = strided_layout(shape, strides);
  op.data = random_vec(static_cast<int64_t>(op.data.size()), lo, hi, seed);
  return op;
}

struct BroadcastCase {
  const char* name;
  std::vector<int64_t> shape;
  std::vector<int64_t> a_strides;
  std::vector<int64_t> b_strides;
};

}  // namespace shardrt::test
