#include "kernels/cpu/cpu_info.h"

#include <cblas.h>

#include "kernels/cpu/simd.h"

namespace shardrt::kernels::cpu {

CpuInfo cpu_info() {
  CpuInfo info;
  switch (openblas_get_parallel()) {  // OpenBLAS's own answer: 0 serial, 1 pthreads, 2 OpenMP
    case 2: info.blas_threading = "openmp"; break;
    case 1: info.blas_threading = "pthread"; break;
    default: info.blas_threading = "serial"; break;
  }
  const char* core = openblas_get_corename();
  info.blas_core = core ? core : "unknown";
  info.simd_target = simd_target();
  return info;
}

}  // namespace shardrt::kernels::cpu
