// shardrt-plan's estimate: for a shardrt-train config on an R x R Darcy grid and a ddp x domain mesh, what each rank
// holds and sends in one training step, before a job is queued.
//
// Memory per rank (bytes):
//   parameters, grads   the optimizer's flat arenas, whole on every rank in every mode (optim/arena.h: padded to
//                       shards x shard_numel, laid out by the same optim::plan_layout the optimizer calls);
//   optimizer state     its kinds (AdamW: exp_avg, exp_avg_sq; SGD with momentum: one; Muon: three) x this rank's
//                       shard (1, ddp or ddp x domain shards by optimizer.mode);
//   buffers             the model's buffers (FLARE's unified position grid, ...), whole;
//   batches             the loader's two fields of this rank's window, twice (the batch in use and the next one,
//                       prefetched);
//   activations         everything a step allocates on top: what the tape saves for backward, the temporaries, the
//                       grads' transients, the update's. MEASURED, not derived: one forward + loss + backward +
//                       optimizer step of the same model on one rank at this rank's local size (its rows of the
//                       grid), peak minus what was held before. Above --probe-points local points the probe runs at
//                       two smaller sizes and the bytes are extrapolated linearly in the rows, which holds because
//                       every bundled model's saved tensors are O(local points) (attention keeps its log-sum-exp,
//                       never the N x N matrix; slice and latent tokens are fixed in number).
//                       With ddp > 1, two copies of the largest module's parameter grads are added: the batch-share
//                       scaling of grads in backward (patches/patch_util.cpp), which a one-rank probe never runs.
//   peak = the sum. The sharded run adds its collectives' buffers (a ring step's K/V block in flight, the
//   all-reduced slice statistics), which the one-rank probe does not see; they are O(local tokens) or fixed-size.
//
// Communication per rank and step (bytes sent, as the ledger counts them, mesh/ledger.h), per mesh axis, from the
// models' collectives (the ones tests/models/*' ledger tests assert) with b = 1 sample per domain group per
// micro-batch, times batch_size / ddp micro-batches, plus the optimizer's once per step:
//   domain  every parameter grad that meets sharded data, summed once (packed weight|bias all_reduce per Linear,
//           LayerNorm, conv, temperature); FLARE: per block the attention's two forward all_reduces (max and the
//           merged [out*w, w] of the latent queries) and two backward (dG|dZ and dq); ViT: ring attention (P-1 K/V
//           shifts forward, 2P-1 backward), the mean over tokens (B, E), pos_embed's gathered grad, the target
//           gathered over domain; GeoTransolver (GALE): the context's and each block's slice sums, each block's dM,
//           the replicated-token weights (qkv_project, cross_*, state_mixing) never; the loss' per-sample sums.
//   ddp     the optimizer: replicated all_reduce of the grad arena; ddp reduce_scatter + all_gather of the
//           parameters (+ the clip norm); mesh: reduce_scatter over ddp, the all_gather over the whole mesh
//           (axis "mesh"); the loss' batch mean (one element per micro-batch); ViT's pos_embed slice grad.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/train_config.h"

namespace shardrt::tools {

struct PlanRequest {
  TrainConfig config;  // the mesh is config.ddp x config.domain
  int64_t resolution = 0;  // R: the grid is R x R
  int64_t probe_points = 1 << 16;
};

struct CommItem {
  std::string what, axis;
  int64_t bytes = 0;  // per step, this rank
};

struct RankPlan {
  int rank = 0, ddp_coord = 0, domain_coord = 0;
  int64_t local_rows = 0, local_points = 0;
  int64_t params = 0, grads = 0, master = 0, state = 0, buffers = 0, batches = 0, activations = 0;
  int64_t peak() const { return params + grads + master + state + buffers + batches + activations; }
  std::vector<CommItem> comm;
  std::map<std::string, int64_t> comm_per_axis() const;
};

struct Plan {
  std::string model;
  int64_t num_parameters = 0, resolution = 0, micro_batches = 1;
  int64_t micro_batch = 1;  // samples per domain group in one forward (data.micro_batch)
  int ddp = 1, domain = 1;
  std::string dtype, optimizer, mode, probe;  // probe: how the activations were obtained
  std::vector<RankPlan> ranks;
};

// Collective over nothing: runs on the calling process alone (the probe on MPI_COMM_SELF). ValueError naming the
// option for a config the estimate does not model (GeoTransolver's GALE_FA, plus, structured or local-feature
// variants; the mse loss).
Plan make_plan(const PlanRequest& request);

nlohmann::json plan_json(const Plan& plan);
// A readable table: ranks with the same figures share a line.
std::string plan_table(const Plan& plan);

// Compares with shardrt-train --measure's document: comm bytes per axis must be equal, peak bytes within
// `peak_tolerance` (relative). Returns the report; `ok` says whether every rank passed.
std::string check_against(const Plan& plan, const nlohmann::json& measured, double peak_tolerance, bool& ok);

}  // namespace shardrt::tools
