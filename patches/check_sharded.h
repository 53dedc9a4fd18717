// The parity harness every sharded op and model test uses.
//
// check_sharded runs `fn` twice on the same full inputs and parameters (identical on every rank):
//   serially — on a mesh of one rank (MPI_COMM_SELF, same axis names), in fp64, every input Replicate;
//   sharded  — on `mesh`, each input distributed with its placements, parameters replicated;
// then compares the outputs (gathered), the grads of every input and of every parameter after one backward
// with the same random grad_output (never sum()). It also asserts that sharding is active (some input's local
// extent is smaller than its global extent, on meshes of more than one rank), that every grad is finite and
// somewhere nonzero, and that replicated outputs are bitwise identical across ranks. It prints max abs/rel
// error against the tolerance even on success. Every rank returns the same verdict.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "patches/shard_tensor.h"

namespace shardrt {

struct ShardedCase {
  std::string name;
  std::vector<Tensor> inputs;                 // full f64 tensors, identical on every rank
  std::vector<Placements> placements;         // one per input
  std::vector<std::vector<std::vector<int64_t>>> extents;  // optional per input (empty: split_extents)
  std::vector<bool> input_requires_grad;      // empty: all true
  std::vector<Tensor> params;                 // full f64 parameters, identical on every rank
  double atol = 1e-10, rtol = 1e-10;
};

using ShardedFn =
    std::function<std::vector<ShardTensor>(const std::vector<ShardTensor>& inputs, const std::vector<Tensor>& params)>;

struct ShardedCheckResult {
  bool ok = false;
  double max_abs_error = 0, max_rel_error = 0;
  std::string report;  // one line per compared quantity
};

ShardedCheckResult check_sharded(const Mesh& mesh, const ShardedFn& fn, const ShardedCase& c);

}  // namespace shardrt
