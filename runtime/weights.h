// The one pair of entry points the model layer uses for parameter files: load_weights reads any format ShardRT
// knows, save_weights writes safetensors.
//
// load_weights decides the format from the file's first bytes, not its name:
//   zip magic   -> an .mdlus (has model.pt and args.json at its root) or a torch.save archive (<archive>/data.pkl)
//   tar magic   -> a legacy-format .mdlus
//   otherwise   -> safetensors (an 8-byte header length, then a JSON header starting with '{')
// and normalises what it found into one flat name -> tensor map:
//   - keys lose every leading "module." (DistributedDataParallel, DataParallel) and "_orig_mod." (torch.compile),
//     repeatedly and in any order, so "module._orig_mod.enc.weight" becomes "enc.weight";
//   - a training checkpoint (a dict whose values are not all tensors) is replaced by the state dict it holds under
//     "model_state_dict", "state_dict" or "model" (the first present); when none is, the IoError lists the
//     top-level keys, so the caller can say which one holds the weights.
// Each such step adds one line to `notes`, so a caller can log what was done to its file.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace shardrt {

struct LoadedWeights {
  std::map<std::string, Tensor> tensors;  // contiguous CPU tensors, keys normalised as above
  std::optional<nlohmann::json> args;     // an .mdlus's args.json ({"__name__", "__module__", "__args__"})
  std::string model_name;                 // an .mdlus's args["__name__"]; empty for other formats
  std::vector<std::string> notes;
  std::string format;  // "safetensors", "torch-zip", "mdlus-zip" or "mdlus-tar"
};

LoadedWeights load_weights(const std::string& path);

// Writes `tensors` as safetensors (atomically; see save_safetensors), which load_weights reads back.
void save_weights(const std::string& path, const std::map<std::string, Tensor>& tensors);

// The training-checkpoint entries load_weights looks in, in order.
inline constexpr const char* kStateDictEntryNames[] = {"model_state_dict", "state_dict", "model"};

}  // namespace shardrt
