// Optimizer <-> sharded checkpoints: the pieces of this rank's shard named by the parameters' state_dict keys, so a
// checkpoint saved by one mesh and mode loads on any other (optim/checkpoint.h intersects the ranges).
#include "optim/optimizer.h"
#include "runtime/errors.h"

namespace shardrt::optim {

std::vector<Optimizer::Piece> Optimizer::shard_pieces() const {
  std::vector<Piece> out;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    const int64_t begin = g.layout.shard_begin(plan_.own_shard), n = g.layout.shard_numel;
    for (size_t i = 0; i < g.layout.slots.size(); ++i) {
      const ArenaSlot& s = g.layout.slots[i];
      const int64_t lo = std::max(s.offset, begin), hi = std::min(s.offset + s.numel, begin + n);
      if (lo >= hi) continue;
      std::vector<std::string> kinds = {"param"};
      if (g.muon[i] || (config_.algorithm == Algorithm::sgd && config_.sgd.momentum != 0))
        kinds.push_back("momentum_buffer");
      else if (config_.algorithm != Algorithm::sgd)
        kinds.insert(kinds.end(), {"exp_avg", "exp_avg_sq"});
      for (const std::string& k : kinds) out.push_back({gi, i, k, lo - begin, hi - lo, lo - s.offset});
    }
  }
  return out;
}

Tensor Optimizer::piece_tensor(const Piece& p) const {
  const Group& g = groups_[p.group];
  const Tensor& whole = p.kind == "param" ? g.master : state_shard(p.group, p.kind);
  return whole.narrow(0, p.at, p.count);
}

CheckpointContents Optimizer::checkpoint_contents() const {
  CheckpointContents c;
  const bool by_ddp = plan_.mode == ShardingMode::ddp || plan_.mode == ShardingMode::zero3;
  const bool writer = plan_.mode == ShardingMode::mesh || (by_ddp && plan_.domain_index == 0) ||
                      (plan_.mode == ShardingMode::replicated && mesh_.rank() == 0);
  if (writer)
    for (const Piece& p : shard_pieces()) {
      const ArenaSlot& s = groups_[p.group].layout.slots[p.slot];
      // CUDA arenas: the writer reads host memory, so each piece comes to the host (one copy either way).
      const Tensor piece = piece_tensor(p);
      c.ranges.push_back({p.kind + "." + s.name, s.shape, p.begin,
                          piece.device().is_cpu() ? piece.clone() : piece.to(Device::cpu())});
    }
  c.state = {{"step", steps_},
             {"algorithm", algorithm_name(config_.algorithm)},
             {"mode", sharding_mode_name(config_.mode)},
             {"mesh_shape", mesh_.shape()},
             {"schedule", config_.schedule ? config_.schedule->describe() : "constant"}};
  return c;
}

std::vector<RangeRequest> Optimizer::checkpoint_requests() const {
  std::vector<RangeRequest> out;
  for (const Piece& p : shard_pieces()) {
    const Group& g = groups_[p.group];
    const ArenaSlot& s = g.layout.slots[p.slot];
    out.push_back({p.kind + "." + s.name, p.begin, p.count, g.master_dtype, s.shape});
  }
  return out;
}

void Optimizer::load_from(const LoadedCheckpoint& loaded) {
  const std::vector<Piece> pieces = shard_pieces();
  SHARDRT_CHECK(loaded.values.size() == pieces.size(), ValueError, "optimizer load_from: ", loaded.values.size(),
                " tensors for the ", pieces.size(), " ranges of checkpoint_requests(); pass load_checkpoint's answer to "
                "exactly those requests");
  SHARDRT_CHECK(loaded.state.contains("step"), ValueError,
                "optimizer load_from: the checkpoint state has no 'step'; it was not saved by Optimizer::save");
  for (size_t k = 0; k < pieces.size(); ++k) piece_tensor(pieces[k]).copy_(loaded.values[k]);
  steps_ = loaded.state.at("step").get<int64_t>();
  if (device_.is_cuda()) write_device_step();
  micro_ = 0;
  auto scope = mesh_.flat().ledger().scope("optimizer.load");
  // zero3: blocks gathered before the load hold stale values; their next forward gathers the loaded shards.
  if (plan_.mode == ShardingMode::zero3) {
    zero3_finish_backward();
    for (size_t u = 0; u < units_.size(); ++u) zero3_release_params(u);
  }
  for (Group& g : groups_) {
    gather_params(g);
    zero_group_grads(g);
  }
}

void Optimizer::save(const std::string& dir) const { save_checkpoint(mesh_, dir, checkpoint_contents()); }

void Optimizer::load(const std::string& dir) { load_from(load_checkpoint(mesh_, dir, checkpoint_requests())); }

}  // namespace shardrt::optim
