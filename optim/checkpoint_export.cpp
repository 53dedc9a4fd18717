// The consolidated exports of optim/checkpoint.h: runtime's writers make the bytes, written here durably.
#include <set>
#include <string>

#include "optim/checkpoint.h"
#include "optim/checkpoint_files.h"
#include "runtime/errors.h"
#include "runtime/mdlus_writer.h"
#include "runtime/safetensors.h"

namespace shardrt {

namespace {

OrderedTensors in_key_order(const char* op, const std::string& path, const std::map<std::string, Tensor>& state_dict,
                            const std::vector<std::string>& key_order) {
  OrderedTensors out;
  std::set<std::string> seen;
  for (const std::string& key : key_order) {
    auto it = state_dict.find(key);
    SHARDRT_CHECK(it != state_dict.end(), ValueError, op, "('", path, "'): key_order names '", key,
                  "', which the state dict does not hold");
    SHARDRT_CHECK(seen.insert(key).second, ValueError, op, "('", path, "'): key_order lists '", key, "' twice");
    out.emplace_back(key, it->second);
  }
  for (const auto& [key, t] : state_dict)
    SHARDRT_CHECK(seen.count(key) != 0, ValueError, op, "('", path, "'): state dict key '", key,
                  "' is missing from key_order (", key_order.size(), " keys for ", state_dict.size(), " tensors)");
  return out;
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  checkpoint_files::write_file_durably(path, std::string(bytes.begin(), bytes.end()));
}

}  // namespace

void export_safetensors(const std::string& path, const std::map<std::string, Tensor>& state_dict) {
  save_safetensors(path, state_dict);
}

void export_mdlus(const std::string& path, const std::map<std::string, Tensor>& state_dict,
                  const std::vector<std::string>& key_order, const nlohmann::json& args) {
  write_bytes(path, mdlus_bytes(in_key_order("export_mdlus", path, state_dict, key_order), args));
}

void export_torch(const std::string& path, const std::map<std::string, Tensor>& state_dict,
                  const std::vector<std::string>& key_order) {
  write_bytes(path, torch_zip_bytes(in_key_order("export_torch", path, state_dict, key_order)));
}

}  // namespace shardrt
