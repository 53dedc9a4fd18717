// bf16 and f16 storage types with round-to-nearest-even conversion to and from f32.
// Host-side only; CUDA kernels use cuda_bf16.h / cuda_fp16.h, which store the same bits.
#pragma once
#include <cstdint>
#include <cstring>

namespace shardrt {

struct bf16 {
  uint16_t bits = 0;
};
struct f16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 h) {
  uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16{static_cast<uint16_t>((u + rounding) >> 16)};
}

float f16_to_float(f16 h);
f16 float_to_f16(float f);

}  // namespace shardrt
