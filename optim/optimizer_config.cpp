#include "optim/optimizer_config.h"

#include "runtime/errors.h"

namespace shardrt::optim {

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::adamw:
      return "adamw";
    case Algorithm::sgd:
      return "sgd";
    case Algorithm::muon_adamw:
      return "muon_adamw";
  }
  return "?";
}

Algorithm parse_algorithm(const std::string& name) {
  if (name == "adamw") return Algorithm::adamw;
  if (name == "sgd") return Algorithm::sgd;
  if (name == "muon_adamw" || name == "muon") return Algorithm::muon_adamw;
  throw ValueError("optimizer: algorithm '" + name + "' is unknown; use adamw, sgd or muon_adamw");
}

const char* sharding_mode_name(ShardingMode m) {
  switch (m) {
    case ShardingMode::replicated:
      return "replicated";
    case ShardingMode::ddp:
      return "ddp";
    case ShardingMode::mesh:
      return "mesh";
    case ShardingMode::zero3:
      return "zero3";
  }
  return "?";
}

ShardingMode parse_sharding_mode(const std::string& name) {
  if (name == "replicated") return ShardingMode::replicated;
  if (name == "ddp") return ShardingMode::ddp;
  if (name == "mesh") return ShardingMode::mesh;
  if (name == "zero3") return ShardingMode::zero3;
  throw ValueError("optimizer: sharding mode '" + name + "' is unknown; use replicated, ddp, mesh or zero3");
}

}  // namespace shardrt::optim
