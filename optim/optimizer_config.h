// What an Optimizer is built from: the algorithm, its options, the sharding mode and the schedule, with the
// parsers of the algorithm and mode names. Kept apart from optimizer.h / sharding.h, which need the mesh, the
// module and autograd, so that a config reader (optim/optimizer_json, tools/train_config, the C API's optimizer
// documents) and its fuzz target (tests/fuzz/fuzz_training_config.cpp) link only runtime/ and these few files.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/muon.h"
#include "optim/schedule.h"
#include "optim/sgd.h"

namespace shardrt::optim {

enum class Algorithm { adamw, sgd, muon_adamw };
const char* algorithm_name(Algorithm a);
Algorithm parse_algorithm(const std::string& name);  // "adamw", "sgd", "muon_adamw" ("muon"); ValueError otherwise

// Where optimizer state lives on a ddp x domain mesh: optim/sharding.h describes each mode.
enum class ShardingMode { replicated, ddp, mesh, zero3 };
const char* sharding_mode_name(ShardingMode m);
ShardingMode parse_sharding_mode(const std::string& name);  // ValueError listing the modes

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
  // zero3: the blocks, as module names (named_modules(); e.g. "stages.0"), each gathered and reduce-scattered on
  // its own. Empty: the model's own list (Module::forward_blocks(); GeoTransolver's context_builder, preprocess.i,
  // blocks.i), and where it gives none every module registered on the model itself as a list entry
  // "<list>.<integer>" (the ViT's stages.i, FLARE's blocks.i). Each block's forward must open
  // Module::forward_scope() (a block that does not fails its first forward with the "released" ValueError). A name
  // that is no module is a ValueError.
  std::vector<std::string> zero3_blocks;
};

}  // namespace shardrt::optim
