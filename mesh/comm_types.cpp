#include "mesh/comm_types.h"

namespace shardrt {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
    case ReduceOp::mean:
      return "mean";
  }
  return "?";
}

}  // namespace shardrt
