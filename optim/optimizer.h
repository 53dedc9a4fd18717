// Optimizer: owns a module's parameters, grads and optimizer state in flat arenas (arena.h), sharded over the mesh
// as the mode says (sharding.h), and steps them with AdamW, SGD, or Muon on 2-D weights plus AdamW on the rest.
//
// Construction moves the module's parameters into the parameter arena (Module::bind_parameters with views into
// it) and binds every leaf grad to a view into the grad arena (bind_grad): backward then accumulates straight into
// the arena, and the reduce_scatter / all_reduce of a step reads it as one buffer. Parameters are grouped by
// dtype: one arena of each kind per dtype.
//
// Precision. f32 and f64 parameters are their own master weights (the update runs on the parameter arena's
// shard). bf16 / f16 parameters get an f32 master shard and f32 state; grads are reduced with f32 accumulation,
// widened to f32 for the update, and the updated master is rounded once into the parameters.
//
// A step (call step() after every micro-batch's backward; with accumulation_steps = k only every k-th call
// updates, the grads of the k micro-batches summed in the arena and divided by k):
//   1. grads reduced over the batch axis (mean; mode-dependent collective, sharding.h);
//   2. clipped to max_grad_norm (when > 0) by the global norm of all shards;
//   3. updated on this rank's shard (lr = base lr x schedule factor of the step count);
//   4. parameters rebuilt (all_gather) where the mode shards them; 5. grads zeroed.
// The collectives are counted in the ledger under "optimizer.reduce_grads", "optimizer.clip" and
// "optimizer.gather_params".
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mesh/mesh.h"
#include "models/module.h"
#include "optim/adamw.h"
#include "optim/arena.h"
#include "optim/checkpoint.h"
#include "optim/grad_buckets.h"
#include "optim/muon.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "optim/sharding.h"

namespace shardrt::optim {

enum class Algorithm { adamw, sgd, muon_adamw };
const char* algorithm_name(Algorithm a);
Algorithm parse_algorithm(const std::string& name);  // "adamw", "sgd", "muon_adamw"

struct OptimizerConfig {
  Algorithm algorithm = Algorithm::adamw;
  AdamWOptions adamw;  // adamw, and the non-2-D parameters of muon_adamw
  SGDOptions sgd;
  MuonOptions muon;    // the 2-D parameters of muon_adamw
  ShardingMode mode = ShardingMode::replicated;
  double max_grad_norm = 0;  // 0: no clipping
  int accumulation_steps = 1;
  // Deferred domain sums (defer_domain_grad_sums): bytes of grads per bucket. 25 MiB, DDP's default bucket cap.
  int64_t bucket_bytes = int64_t{25} << 20;
  std::shared_ptr<Schedule> schedule;  // null: constant
};

// Bytes this rank's optimizer holds, by kind, from the arenas' allocations.
struct OptimizerMemory {
  int64_t params = 0, grads = 0, master = 0, state = 0;
  int64_t num_parameters = 0;
  int64_t total() const { return params + grads + master + state; }
  double bytes_per_parameter() const {
    return num_parameters ? static_cast<double>(total()) / static_cast<double>(num_parameters) : 0;
  }
};

class Optimizer {
 public:
  // Collective over the mesh: every rank must construct it with the same parameter set (checked by one all_reduce
  // of the arena sizes, ledger scope "optimizer.setup"; a mismatch is a ValueError on every rank).
  Optimizer(const Mesh& mesh, models::Module& module, OptimizerConfig config);
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Returns true when this call updated the parameters (every accumulation_steps-th call).
  bool step();
  void zero_grad();

  // Opens one step's deferred domain-axis grad sums (optim/grad_buckets.h): keep the returned scope alive over the
  // forward and backward of the micro-batch (the patches decide when ops are recorded), then call step(), which
  // finishes the buckets first. The scope's buckets all_reduce over the domain axis during backward, each as soon
  // as its parameters' grads are final, and the batch-axis step follows unchanged (reduce_scatter over ddp) — except
  // in `replicated` mode, where the buckets all_reduce over the whole mesh and so make the ddp sum too.
  // With accumulation_steps = k every micro-batch of a window must be deferred alike (or none): the partial grads
  // accumulate and only the window's last backward sums them (a mix is a ValueError at the update).
  [[nodiscard]] std::shared_ptr<DeferredDomainSums> defer_domain_grad_sums();

  int64_t steps_taken() const { return steps_; }
  double current_lr_factor() const;
  double last_grad_norm() const { return last_norm_; }  // before clipping; 0 when clipping is off
  const ShardPlan& plan() const { return plan_; }
  OptimizerMemory memory() const;
  size_t num_groups() const { return groups_.size(); }
  const ArenaLayout& layout(size_t group) const { return groups_.at(group).layout; }
  const FlatArena& param_arena(size_t group) const { return groups_.at(group).params; }
  const FlatArena& grad_arena(size_t group) const { return groups_.at(group).grads; }
  // ---- checkpoints (optim/checkpoint.h) ----
  // What this rank writes: for each parameter slot meeting its shard, the master weights as "param.<key>" and the
  // slot's own state as "<state>.<key>" (exp_avg / exp_avg_sq for AdamW slots, momentum_buffer for Muon and SGD),
  // element ranges of the whole tensors, so any mesh and mode can read them back. Ranks holding the same shard (every
  // rank in `replicated`, the domain ranks of a ddp group in `ddp`) leave the writing to the first of them. `state`:
  // step count, algorithm, mode, mesh shape.
  CheckpointContents checkpoint_contents() const;
  // The ranges this rank needs to resume: its own shard of every slot (whatever mesh and mode saved them).
  std::vector<RangeRequest> checkpoint_requests() const;
  // Takes the answers to checkpoint_requests() (in that order) and the step count, then rebuilds the parameters
  // from the master shards (collective: the mode's all_gather) and zeroes the grads.
  void load_from(const LoadedCheckpoint& loaded);
  // save_checkpoint / load_checkpoint of the above, collective over the mesh.
  void save(const std::string& dir) const;
  void load(const std::string& dir);

  // State `name` ("exp_avg", "exp_avg_sq", "momentum_buffer") of this rank's shard, shard_numel elements.
  Tensor state_shard(size_t group, const std::string& name) const;

 private:
  struct Group {
    DType dtype, master_dtype;
    ArenaLayout layout;
    std::vector<bool> muon;   // per slot: updated by Muon
    FlatArena params, grads;  // whole arenas, in the parameter dtype
    Tensor master;            // this rank's shard of the master weights (a view of params when no copy)
    std::vector<std::pair<std::string, Tensor>> state;  // per kind, shard-sized, master dtype
    Tensor grad_shard;        // this step's reduced grad of the shard (set during step)
  };
  void check_same_parameters_everywhere() const;
  // Each (group, slot, state kind or "param") piece of this rank's shard, in one fixed order, for save and load.
  struct Piece {
    size_t group, slot;
    std::string kind;  // "param" or a state name
    int64_t at, count;  // within the shard
    int64_t begin;      // within the parameter
  };
  std::vector<Piece> shard_pieces() const;
  Tensor piece_tensor(const Piece& p) const;
  void reduce_grads(Group& g, double scale);
  double clip(std::vector<Group>& groups);
  void update(Group& g, double lr_factor);
  void gather_params(Group& g);

  Mesh mesh_;
  OptimizerConfig config_;
  ShardPlan plan_;
  std::vector<Group> groups_;
  int64_t steps_ = 0;
  int micro_ = 0;
  double last_norm_ = 0;
  int64_t num_parameters_ = 0;
  std::vector<std::vector<AutogradMeta*>> leaves_;  // per group, per slot: the bound parameter's autograd meta
  std::weak_ptr<DeferredDomainSums> deferral_;      // the open deferred scope of this micro-batch, if any
  int deferred_micros_ = 0;                         // micro-batches of this window whose domain sums were deferred
  bool batch_summed_ = false;                       // this step's grads are already summed over ddp (deferred)
};

}  // namespace shardrt::optim
