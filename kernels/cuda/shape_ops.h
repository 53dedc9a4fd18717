// N-d padding (constant, reflect, replicate, circular) of the trailing 1-3 dims on a CUDA device.
// Contract: pad and pad_backward in kernels/cpu/shape_ops.h (negative pads crop, the same index maps). CUDA: the
// other copies of that header (copy_block, cat, split) and permute/contiguous run on CUDA through the strided copy
// of runtime/cuda/copy_cuda.h, which the shape ops already use; only padding needs a kernel of its own. One thread
// per output element forward; the backward gathers per input element over the outputs that read it, in the CPU's
// order (so the folded sums agree bit for bit), at O(out) checks per padded axis. `in`, `pad_lo`, `pad_hi` are host
// arrays of nd entries. Templates over T in {float, double}; device data on the device that owns `stream`; queued on
// `stream`, never synchronises.
#pragma once
#include <cstdint>

#include "kernels/cpu/shape_ops.h"  // PadMode, shared by both backends
#include "runtime/cuda_context.h"

namespace shardrt::kernels::cuda {

using kernels::cpu::PadMode;

template <typename T>
void pad(PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* pad_lo, const int64_t* pad_hi,
         T value, const T* x, T* y, CudaStream stream);

template <typename T>
void pad_backward(PadMode mode, int nd, int64_t outer, const int64_t* in, const int64_t* pad_lo,
                  const int64_t* pad_hi, const T* gy, T* gx, CudaStream stream);

}  // namespace shardrt::kernels::cuda
