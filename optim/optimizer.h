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
//
// zero3 (sharding.h; the machinery in optim/zero3.cpp, the design in docs/optimizer.md "ZeRO-3"): the parameters
// are grouped per block (each block's own arenas, sharded over ddp) and held between uses only as this rank's
// shard; the block's forward hooks (Module::forward_scope) and the engine's before-node hook gather them and
// reduce-scatter their grads during forward and backward, under the ledger scopes "zero3.gather_forward",
// "zero3.gather_backward" and "zero3.reduce_grads" (nested in whatever scope the caller has open). Call step()
// after every backward. Between steps the blocks' parameter tensors are handles whose storage is released: read
// them after summon_parameters(). The module must outlive the optimizer.
//
// CUDA parameters (optim/optimizer_device.cpp; docs/gpu.md): every parameter on one device (a mix is a
// DeviceError naming two of them); the arenas, master weights and state live there, leaf grads are views into
// the device grad arena, the collectives run on device buffers (NCCL, or staged through the host by the MPI
// backend), the clipping norm is reduced on the device, and AdamW / SGD update through the fused kernels with
// the learning rate and step count in device memory (kernels/cuda/optim_update.h: advance_step), so a step can be
// captured into a CUDA graph (optim/captured_step.h). No step reads the device from the host, except a
// multi-rank collective staged through MPI; last_grad_norm() does (one read, on demand). Modes replicated, ddp and
// mesh; zero3 and the deferred domain sums are refused on CUDA with a DeviceError (not done yet). Muon runs
// eagerly on CUDA (its rate is a host scalar) and is refused by a capture.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mesh/comm_handle.h"
#include "mesh/mesh.h"
#include "models/module.h"
#include "optim/adamw.h"
#include "optim/arena.h"
#include "optim/checkpoint.h"
#include "optim/grad_buckets.h"
#include "optim/muon.h"
#include "optim/optimizer_config.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "optim/sharding.h"

namespace shardrt::optim {

// zero3's communication, for measuring how much of it hides behind compute: the seconds spent issuing and
// waiting on its handles (exposed), and the calls, since construction or the last reset.
struct Zero3Stats {
  int64_t gathers = 0, reduce_scatters = 0;
  double issue_s = 0;        // inside the *_async calls (packing, signature check, MPI start)
  double gather_wait_s = 0;  // blocked in a gather's wait()
  double reduce_wait_s = 0;  // blocked in a reduce-scatter's wait()
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
  ~Optimizer();

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
  // Before clipping; 0 when clipping is off. CUDA parameters: read from the device (synchronises).
  double last_grad_norm() const;
  Device device() const { return device_; }  // where the parameters, grads and arenas live
  const ShardPlan& plan() const { return plan_; }
  // Bytes held now (at rest between steps: what a mode keeps; zero3's gathered blocks are transient).
  OptimizerMemory memory() const;
  // ---- zero3 ----
  // Collective: gathers every block's parameters so the module's tensors can be read (they stay resident until
  // the next forward of each block releases them). No-op in the other modes.
  void summon_parameters();
  // The blocks (zero3), in forward order, by module name; empty in the other modes.
  std::vector<std::string> zero3_block_names() const;
  const Zero3Stats& zero3_stats() const { return zero3_stats_; }
  void reset_zero3_stats() { zero3_stats_ = {}; }
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
    // Deferred domain sums into the shard (ddp, mesh, zero3's root unit): the window's grad shard, reduced over ddp
    // and domain by the buckets during the last backward (shard_numel elements, master dtype); step() uses it as
    // it is instead of reduce-scattering the arena.
    Tensor deferred_shard;
    int unit = -1;            // zero3: the block it belongs to; -1 the root unit (and every group of other modes)
    Tensor zero3_grad;        // zero3 blocks: the shard's grad, reduce-scattered per backward and summed over them
  };
  // zero3: one block's state through a step (optim/zero3.cpp).
  struct Unit {
    std::string name;
    models::Module* module = nullptr;
    std::vector<size_t> groups;
    uint64_t seq_begin = 0, seq_end = 0;  // the tape nodes its last forward recorded: [begin, end)
    bool recorded = false;                // seq range valid (a forward ran since the last step)
    bool gathering = false, gathered = false, grads_live = false, reducing = false;
    std::vector<CommHandle> gathers;
    // Per group: the grad reduction of its last backward into the group's zero3_grad (optim/shard_reduce.h): the
    // reduce_scatter over ddp, then, when this micro-batch deferred its domain sums and ends the window, the
    // all_reduce over domain of the shard. `reducing`: the reduce-scatter may be in flight (the full grads live).
    std::vector<ShardReduce> reduces;
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
  void zero_group_grads(Group& g);
  // CUDA parameters (optim/optimizer_device.cpp)
  void device_setup();
  void scale_grad(Tensor& t, double s);
  double clip_on_device(std::vector<Group>& groups);
  void update_on_device(Group& g, double lr_factor);
  void write_device_step();  // device step scalars <- steps_ (construction, load)
  // zero3 (optim/zero3.cpp)
  std::vector<int> zero3_assign_units(models::Module& module, const models::NamedTensors& named);
  void zero3_install();
  void zero3_before_forward(size_t u);
  void zero3_after_forward(size_t u);
  void zero3_before_node(uint64_t seq);
  void zero3_start_gather(size_t u, const char* scope);
  void zero3_wait_gather(size_t u);
  void zero3_release_params(size_t u);
  void zero3_begin_backward(size_t u);
  void zero3_end_backward(size_t u);
  void zero3_finish_reduce(size_t u);  // completes the reduce-scatter (the domain sum goes out) and frees the grads
  void zero3_finish_backward();  // closes the backward: every reduce-scatter done, every block released
  friend void zero3_dispatch_before_node(uint64_t seq);

  Mesh mesh_;
  OptimizerConfig config_;
  ShardPlan plan_;
  std::vector<Group> groups_;
  int64_t steps_ = 0;
  int micro_ = 0;
  double last_norm_ = 0;
  int64_t num_parameters_ = 0;
  std::vector<Unit> units_;     // zero3 only
  int backward_unit_ = -1;      // zero3: the block whose backward is running
  Zero3Stats zero3_stats_;
  std::vector<std::vector<AutogradMeta*>> leaves_;  // per group, per slot: the bound parameter's autograd meta
  std::weak_ptr<DeferredDomainSums> deferral_;      // the open deferred scope of this micro-batch, if any
  int deferred_micros_ = 0;                         // micro-batches of this window whose domain sums were deferred
  bool batch_summed_ = false;                       // this step's grads are already summed over ddp (deferred)
  // This micro-batch deferred its domain sums and ends the accumulation window: zero3's blocks sum their grad
  // shards over domain after the reduce-scatter (zero3.cpp). Set by defer_domain_grad_sums, cleared by step().
  bool zero3_sum_domain_ = false;
  // CUDA parameters
  Device device_ = Device::cpu();
  Tensor step_scalars_;  // u8 bytes of a kernels::cuda::DeviceStepScalars, on device_
  Tensor clip_slots_;    // f64 on device_: [0] squared norm, [1] norm, [2] coefficient, then the partial sums
  Tensor lr_table_;      // set by a capture: the schedule factors of steps lr_table_first_, ... (device f64)
  int64_t lr_table_first_ = 0;
  friend class CapturedStep;
};

}  // namespace shardrt::optim
