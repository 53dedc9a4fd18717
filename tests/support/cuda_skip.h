// The one way a CUDA test case skips: `if (skip_without_cuda()) return;` as its first line. Catch2 2.x has no SKIP,
// so the skip is a visible warning in the binary's output (and in `ctest -V`), never a silent pass.
#pragma once
#include <catch2/catch.hpp>

#include "runtime/cuda_context.h"

namespace shardrt::test {

inline bool skip_without_cuda() {
  if (cuda_device_count() > 0) return false;
  WARN("skipped: no CUDA device");
  return true;
}

}  // namespace shardrt::test
