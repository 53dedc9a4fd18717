// Shared by the checkpoint tests and their helper program: named global tensors with known values, laid out back to
// back in a flat arena as a ddp-sharded optimizer lays them out, the ranges one rank of such an arena owns, and
// bit-exact comparison.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "optim/checkpoint.h"
#include "runtime/factories.h"
#include "runtime/tensor.h"

namespace shardrt::test {

struct GlobalTensor {
  std::string name;
  Shape shape;
  Tensor values;  // contiguous, the tensor's dtype
};

// Distinct values for every element of every tensor, from `version` so two saves differ everywhere; each dtype
// gets values that use its whole mantissa / range (not only small integers), so a misplaced byte shows.
inline Tensor known_values(const Shape& shape, DType dtype, double version, double salt) {
  const int64_t n = shape_numel(shape);
  Tensor f = Tensor::empty({n}, DType::f64);
  double* p = f.data<double>();
  for (int64_t i = 0; i < n; ++i) {
    const double x = std::sin(0.731 * static_cast<double>(i) + salt + 0.1 * version) * 1000.0 + version;
    p[i] = is_floating(dtype) ? x : dtype == DType::boolean ? static_cast<double>((i + static_cast<int64_t>(version)) % 3 == 0)
                                  : dtype == DType::u8 ? std::fmod(std::fabs(std::round(x)), 256.0) : std::round(x * 1000.0);
  }
  return f.to(dtype).reshape(shape).contiguous();
}

// The optimizer-like set of tensors the reshard tests save: parameters and AdamW state of several dtypes and ranks.
inline std::vector<GlobalTensor> optimizer_like_tensors(double version) {
  const std::vector<std::tuple<std::string, Shape, DType>> spec = {
      {"param.blocks.0.weight", {7, 5}, DType::f32},   {"exp_avg.blocks.0.weight", {7, 5}, DType::f32},
      {"exp_avg_sq.blocks.0.weight", {7, 5}, DType::f32}, {"param.blocks.0.bias", {13}, DType::f64},
      {"param.embed", {3, 4, 2}, DType::bf16},           {"param.half", {9}, DType::f16},
      {"step.per_group", {5}, DType::i64},               {"mask.tokens", {6}, DType::boolean},
      {"param.codes", {4, 3}, DType::i32},               {"param.bytes", {10}, DType::u8},
      {"param.scalar", {}, DType::f64},
  };
  std::vector<GlobalTensor> out;
  double salt = 0.0;
  for (const auto& [name, shape, dtype] : spec) out.push_back({name, shape, known_values(shape, dtype, version, salt += 1.3)});
  return out;
}

inline int64_t arena_numel(const std::vector<GlobalTensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += shape_numel(t.shape);
  return n;
}

// Rank r's arena range on `ranks` ranks: uneven shares (rank r's grows with r + 2), and on three or more ranks the
// last rank gets nothing, so a zero-size owner is among the cases.
inline std::pair<int64_t, int64_t> uneven_arena_range(int64_t total, int rank, int ranks) {
  const int owners = ranks >= 3 ? ranks - 1 : ranks;
  if (rank >= owners) return {total, total};
  int64_t weight_sum = 0, before = 0;
  for (int r = 0; r < owners; ++r) weight_sum += r + 2;
  for (int r = 0; r < rank; ++r) before += r + 2;
  const int64_t lo = total * before / weight_sum;
  const int64_t hi = rank == owners - 1 ? total : total * (before + rank + 2) / weight_sum;
  return {lo, hi};
}

// What one rank owning arena elements [lo, hi) writes: one SavedRange per tensor the range touches.
inline CheckpointContents arena_contents(const std::vector<GlobalTensor>& tensors, int64_t lo, int64_t hi) {
  CheckpointContents c;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const int64_t n = shape_numel(t.shape);
    const int64_t a = std::max(lo, offset), b = std::min(hi, offset + n);
    if (a < b) c.ranges.push_back({t.name, t.shape, a - offset, t.values.reshape({n}).narrow(0, a - offset, b - a)});
    offset += n;
  }
  return c;
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.nbytes() == 0 || std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// Elements [begin, begin + count) of a global tensor, flat.
inline Tensor flat_slice(const GlobalTensor& t, int64_t begin, int64_t count) {
  return t.values.reshape({shape_numel(t.shape)}).narrow(0, begin, count);
}

}  // namespace shardrt::test

namespace shardrt::test {

// What the kill-during-save writer saves as version `version`: one large f32 tensor (`megabytes` of it) and a small
// f64 one, split into two ranges each so a file holds several pieces.
inline std::vector<GlobalTensor> writer_tensors(int64_t megabytes, int version) {
  const Shape big = {megabytes * 1024 * 1024 / 4};
  return {{"param.big", big, known_values(big, DType::f32, version, 0.5)},
          {"exp_avg.small", {17}, known_values({17}, DType::f64, version, 2.5)}};
}

}  // namespace shardrt::test
