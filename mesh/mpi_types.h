// ShardRT dtypes and reductions in MPI terms. MPI has no bf16/f16 types: they travel as 16-bit words and
// are reduced by user-defined MPI operations that do the arithmetic in f32 and round after each step.
#pragma once
#include <mpi.h>

#include <cstdint>

#include "mesh/comm_types.h"
#include "runtime/dtype.h"

namespace shardrt {

MPI_Datatype mpi_datatype(DType t);
// The MPI operation for `op` on `t`; `mean` maps to the sum (the caller divides afterwards).
MPI_Op mpi_reduce_op(DType t, ReduceOp op);
// data[i] /= divisor for a floating buffer on the host (the division of a mean).
void divide_host(void* data, DType t, int64_t n, double divisor);

}  // namespace shardrt
