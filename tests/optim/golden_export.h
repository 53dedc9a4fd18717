// The FLARE golden case's weights as a PhysicsNeMo state dict: the bundled model built from the case's config, the
// golden weights loaded into it, its state_dict keys and order, and PhysicsNeMo's args.json for it. Shared by the CI
// export test and the program that writes the exports tools/golden/check_mdlus_export.py opens in PhysicsNeMo.
#pragma once
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/weights.h"

namespace shardrt::test {

struct ExportableStateDict {
  std::map<std::string, Tensor> tensors;
  std::vector<std::string> key_order;  // the model's state_dict order (PhysicsNeMo's)
  nlohmann::json args;                 // {"__name__", "__module__", "__args__"}
};

inline ExportableStateDict flare_golden_state_dict(const std::string& data_dir, const std::string& golden_case) {
  const std::string base = data_dir + "/golden/" + golden_case;
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(base + ".config.json"));
  auto model = models::build_model("flare", config, {DType::f64, 0});
  model->load_state_dict(load_weights(base + ".weights.safetensors").tensors, true, base + ".weights.safetensors");
  ExportableStateDict out;
  for (const auto& [key, t] : model->state_dict()) {
    out.tensors.emplace(key, t.detach().contiguous());
    out.key_order.push_back(key);
  }
  out.args = {{"__name__", "FLARE"}, {"__module__", "physicsnemo.models.flare.flare"}, {"__args__", config}};
  return out;
}

}  // namespace shardrt::test
