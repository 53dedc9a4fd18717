// Vector kernels with runtime dispatch: the one pattern every kernels/cpu/*_simd.cpp follows.
//
// Why: the library is built for the x86-64 baseline (no -march), so the compiler alone emits SSE2 at best. Highway
// compiles each *_simd.cpp once per target (SSE4, AVX2, AVX-512, ...) and picks the best one the running CPU has,
// the first time a kernel is called; SLEEF supplies the vector exp, log, tanh and erf for those targets. One
// installed binary is then fast on every x86 machine, and nothing is baked to the build machine's CPU.
//
// The pattern (kernels/cpu/elementwise_simd.cpp is the smallest complete example):
//   1. The file defines HWY_TARGET_INCLUDE to its own path and includes <hwy/foreach_target.h>, then
//      <hwy/highway.h> and "kernels/cpu/simd-inl.h" (per-target helpers: vector math, tail-safe loops, sums).
//      foreach_target re-includes the file once per target, each time with a different HWY_NAMESPACE.
//   2. Between HWY_BEFORE_NAMESPACE() and HWY_AFTER_NAMESPACE(), inside namespace
//      shardrt::kernels::cpu::HWY_NAMESPACE, it writes plain (non-template) functions over one contiguous
//      range, built from templates over a Highway tag. These never thread: they are the body of one chunk.
//   3. Under `#if HWY_ONCE` (compiled once), HWY_EXPORT(Fn) builds the table of the per-target versions and a
//      normal C++ function calls HWY_DYNAMIC_DISPATCH(Fn)(args...). Those normal functions are what the rest of
//      kernels/cpu sees, declared in a *_simd.h header with no Highway in it.
//   4. Threading stays with the caller (one OpenMP pool, shared with OpenBLAS): split the work into chunks whose
//      boundaries depend only on the shape (parallel_chunks below), so results are bitwise identical for any
//      thread count, and call the dispatched function per chunk.
//   5. Strided and broadcast operands keep their scalar loops; only contiguous runs go to the vector code.
//      Tails shorter than a vector run through the same vector code on a padded copy, so every element of a
//      call is computed the same way whatever its position.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

namespace shardrt::kernels::cpu {

// Work below this many elements stays on one thread (forking a team costs more than the loop); larger work is cut
// into chunks of this many elements.
inline constexpr int64_t kSimdChunk = int64_t{1} << 15;

// Calls body(begin, end) for consecutive chunks of [0, n) of kSimdChunk elements, in parallel when there is more
// than one. The cut depends on n alone.
template <class Body>
void parallel_chunks(int64_t n, Body body) {
  const int64_t chunks = (n + kSimdChunk - 1) / kSimdChunk;
#pragma omp parallel for if (chunks > 1) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) body(c * kSimdChunk, std::min(n, (c + 1) * kSimdChunk));
}

// The Highway target the dispatched kernels run on this CPU ("AVX3", "AVX2", "SSE4", ...).
std::string simd_target();

}  // namespace shardrt::kernels::cpu
