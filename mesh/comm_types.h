// Small value types shared by the communicator, its backends and the mesh.
#pragma once
#include <cstdint>
#include <vector>

namespace shardrt {

// Reductions. `mean` is sum / P and needs a floating dtype (an integer mean would silently truncate).
enum class ReduceOp { sum, max, min, mean };
const char* reduce_op_name(ReduceOp op);

// Arithmetic precision of a reduction on bf16/f16 buffers. `f32` widens the buffer to f32, reduces, and rounds
// once at the end (the wire then carries f32); `native` reduces in the 16-bit type, rounding at every step.
// Ignored for other dtypes.
enum class Accumulate { native, f32 };

// Which transport carries CUDA buffers. `automatic` picks NCCL when ShardRT was built with it and every rank of
// the communicator is bound to its own GPU, and MPI through pinned host memory otherwise (several ranks on one
// GPU, which NCCL refuses).
enum class CudaTransport { automatic, nccl, mpi_staged };

// What a communication failure (timeout, transport error) does. `abort_job` prints the CommError to stderr and
// takes the whole job down with MPI_Abort, because peers blocked in the same collective can never be released
// otherwise. `throw_error` throws the CommError instead and leaves the communicator unusable; it exists so
// tests can inspect the error in-process.
enum class FailurePolicy { abort_job, throw_error };

// Halo widths of every rank of a communicator, in slices along the exchanged dim; the same vectors on every
// rank. left[r] slices arrive at rank r from rank r-1, right[r] slices from rank r+1.
struct HaloWidths {
  std::vector<int64_t> left;
  std::vector<int64_t> right;
};

}  // namespace shardrt
