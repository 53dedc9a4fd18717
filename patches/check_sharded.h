// The parity harness every sharded op and model test uses.
//
// check_sharded runs `fn` twice on the same full inputs and parameters (identical on every rank):
//   serially — on a mesh of one rank (MPI_COMM_SELF, same axis names), in fp64, every input Replicate;
//   sharded  — on `mesh`, each input distributed with its placements (and extents, when given), parameters
//              replicated; along a Partial axis the ranks hold rank-distinct parts that sum to the input;
// then compares the outputs (gathered), the grads of every input and of every parameter after one backward
// with the same random grad_output (never sum()). Parameter grads are compared after reduce_batch_grads (the
// average over the mesh's batch axes that the optimizer does, once): a patch that already summed them over a batch axis
// counts them twice and fails. It also asserts that sharding is active on meshes of more
// than one rank (some input is split so that every rank's local extent is smaller than the global extent, or
// is Partial over several ranks), that every grad is finite and somewhere nonzero, and that every gathered
// output and grad (so every replicated output and every parameter grad) is bitwise identical on every rank. It
// prints, on mesh rank 0, max abs/rel error (rel: max |error| / max |serial value|) of each quantity against
// the tolerance even on success, and returns the same lines in `report`. Every rank returns the same verdict
// and errors (maxima over the ranks). Its own collectives run in the ledger scope "check_sharded"; the serial
// mesh has a ledger of its own.
//
// Device: the sharded run takes place on the case's `device` (default: the CPU), or on the mesh's device
// (mesh.device(), cuda:N) for every case when the environment sets SHARDRT_CHECK_DEVICE=cuda — so the whole
// patch suite runs on a GPU unchanged, e.g. two ranks sharing cuda:0 (`SHARDRT_CHECK_DEVICE=cuda
// tests/mpirun.sh 2 build/tests/test_patches`); its collectives then stage device buffers through MPI, or use NCCL
// where each rank has a GPU of its own. Inputs and parameters are moved there in f64 before they are distributed,
// the results are gathered back to the host, and the serial oracle always runs on the CPU. SHARDRT_CHECK_DEVICE=cuda
// on a mesh bound to no GPU is a ValueError.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "patches/shard_tensor.h"

namespace shardrt {

struct ShardedCase {
  std::string name;
  std::vector<Tensor> inputs;                              // full f64 tensors, identical on every rank
  std::vector<Placements> placements;                      // one per input
  std::vector<AxisExtents> extents;  // optional per input (empty: split_extents)
  std::vector<bool> input_requires_grad;                   // empty: all true
  std::vector<Tensor> params;                              // full f64 parameters, identical on every rank
  double atol = 1e-10, rtol = 1e-10;
  Device device = Device::cpu();  // where the sharded run takes place (see above)
  // A case about a rank without data (a batch of one sample over two ddp groups, one domain rank each): the layout
  // leaves one rank everything, so instead of sharding the check asserts that some input has a zero-size shard on
  // an axis of several ranks.
  bool empty_rank_case = false;
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
