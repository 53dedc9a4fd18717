// Philox-4x32-10 counter-based generator (Salmon et al., SC'11). Pure function of (key, counter), so the
// host and CUDA kernels produce the same bits for the same seed and offset.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define SHARDRT_HD __host__ __device__ inline
#else
#define SHARDRT_HD inline
#endif

namespace shardrt::philox {

struct U32x4 {
  uint32_t v[4];
};

SHARDRT_HD uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

SHARDRT_HD U32x4 philox4x32_10(U32x4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(kM0, ctr.v[0], &hi0);
    uint32_t lo1 = mulhilo(kM1, ctr.v[2], &hi1);
    ctr = U32x4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// The four words for element `index` of a draw at stream position `offset` under `seed`.
SHARDRT_HD U32x4 element_bits(uint64_t seed, uint64_t offset, uint64_t index) {
  U32x4 ctr{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(offset),
             static_cast<uint32_t>(offset >> 32)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform in [0, 1): 24 bits for f32, 53 bits for f64.
SHARDRT_HD float uniform_f32(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }
SHARDRT_HD double uniform_f64(uint32_t w0, uint32_t w1) {
  uint64_t bits = (static_cast<uint64_t>(w0) << 21) ^ (w1 >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace shardrt::philox
