// What the CPU kernels run on, as found at run time: the BLAS's threading (the build links OpenBLAS's OpenMP
// variant when it can, see meson.build) and the SIMD target the vector kernels dispatched to. Benchmarks print it.
#pragma once
#include <string>

namespace shardrt::kernels::cpu {

struct CpuInfo {
  std::string blas_threading;  // "openmp" (one pool with the kernels), "pthread" (its own pool) or "serial"
  std::string blas_core;       // the kernel set OpenBLAS picked for this CPU (e.g. "SkylakeX", "Zen")
  std::string simd_target;     // Highway's target for the vector kernels (e.g. "AVX3", "AVX2")
};

CpuInfo cpu_info();

}  // namespace shardrt::kernels::cpu
