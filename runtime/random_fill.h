// Element-wise Philox fills shared by the host and CUDA implementations.
#pragma once
#include <cmath>
#include <cstdint>

#include "runtime/philox.h"

namespace shardrt::philox {

enum class Distribution : uint8_t { uniform, normal };

// Value of element `i` for a draw: f64 uses 53-bit uniforms, f32 24-bit ones; normal is Box-Muller on the
// first pair of uniforms (cosine branch).
SHARDRT_HD double sample_f64(Distribution dist, uint64_t seed, uint64_t offset, uint64_t i, double a, double b) {
  U32x4 w = element_bits(seed, offset, i);
  if (dist == Distribution::uniform) return a + (b - a) * uniform_f64(w.v[0], w.v[1]);
  double u1 = 1.0 - uniform_f64(w.v[0], w.v[1]);  // (0, 1]: log is finite
  double u2 = uniform_f64(w.v[2], w.v[3]);
  return a + b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

SHARDRT_HD float sample_f32(Distribution dist, uint64_t seed, uint64_t offset, uint64_t i, float a, float b) {
  U32x4 w = element_bits(seed, offset, i);
  if (dist == Distribution::uniform) return a + (b - a) * uniform_f32(w.v[0]);
  float u1 = 1.0f - uniform_f32(w.v[0]);
  float u2 = uniform_f32(w.v[1]);
  return a + b * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

}  // namespace shardrt::philox
