#include "runtime/weights.h"

#include <fstream>
#include <string_view>

#include "runtime/errors.h"
#include "runtime/safetensors.h"
#include "runtime/tar_archive.h"
#include "runtime/torch_checkpoint.h"
#include "runtime/zip_archive.h"

namespace shardrt {

namespace {

template <typename... Args>
[[noreturn]] void weights_error(const std::string& path, const Args&... args) {
  throw IoError(detail::concat("load_weights: '", path, "': ", args...));
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

// A plain state dict has tensors only; anything else is a training checkpoint, whose weights are in one entry.
std::map<std::string, Tensor> pick_state_dict(const std::string& path, TorchStateDict sd,
                                              std::vector<std::string>& notes) {
  if (sd.dicts.empty() && sd.other_keys.empty()) return std::move(sd.tensors);
  for (const char* name : kStateDictEntryNames) {
    auto it = sd.dicts.find(name);
    if (it == sd.dicts.end()) continue;
    TorchStateDict& inner = *it->second;
    if (!inner.dicts.empty() || !inner.other_keys.empty()) {
      std::vector<std::string> not_tensors = inner.other_keys;
      for (const auto& [key, dict] : inner.dicts) not_tensors.push_back(key);
      weights_error(path, "training checkpoint entry '", name, "' is not a state dict: besides tensors it holds ",
                    join(not_tensors));
    }
    notes.push_back(detail::concat("'", path, "' is a training checkpoint (top-level keys: ", join(sd.keys),
                                   "); loaded the state dict under '", name, "'"));
    return std::move(inner.tensors);
  }
  weights_error(path, "holds a dict that is not a state dict (top-level keys: ", join(sd.keys),
                "), and none of 'model_state_dict', 'state_dict', 'model' is a dict of tensors; save the state ",
                "dict itself, e.g. torch.save(checkpoint['<key>'], path)");
}

// Wrappers prefix every parameter name: DistributedDataParallel/DataParallel with "module.", torch.compile with
// "_orig_mod.", nested in either order. The model layer's names are the unwrapped module's.
std::map<std::string, Tensor> strip_wrapper_prefixes(const std::string& path, std::map<std::string, Tensor> tensors,
                                                     std::vector<std::string>& notes) {
  static constexpr std::string_view kPrefixes[] = {"module.", "_orig_mod."};
  std::map<std::string, Tensor> out;
  std::map<std::string, std::string> original_of;
  std::size_t stripped = 0;
  std::string example;
  for (auto& [key, tensor] : tensors) {
    std::string_view name = key;
    for (bool changed = true; changed;) {
      changed = false;
      for (std::string_view prefix : kPrefixes) {
        // A key that is nothing but a prefix keeps it: an empty name would fit no parameter.
        if (name.starts_with(prefix) && name.size() > prefix.size()) {
          name.remove_prefix(prefix.size());
          changed = true;
        }
      }
    }
    std::string new_key(name);
    if (new_key != key && stripped++ == 0) example = detail::concat("'", key, "' -> '", new_key, "'");
    auto [it, inserted] = original_of.emplace(new_key, key);
    if (!inserted)
      weights_error(path, "removing the prefixes 'module.'/'_orig_mod.' maps both '", it->second, "' and '", key,
                    "' to '", new_key, "'");
    out.emplace(std::move(new_key), std::move(tensor));
  }
  if (stripped > 0)
    notes.push_back(detail::concat("removed the wrapper prefixes 'module.'/'_orig_mod.' from ", stripped, " of ",
                                   out.size(), " keys (e.g. ", example, ")"));
  return out;
}

std::vector<unsigned char> read_head(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) weights_error(path, "cannot open it");
  std::vector<unsigned char> head(512);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head;
}

}  // namespace

LoadedWeights load_weights(const std::string& path) {
  const std::vector<unsigned char> head = read_head(path);
  LoadedWeights out;
  std::map<std::string, Tensor> tensors;
  auto from_mdlus = [&] {
    MdlusCheckpoint m = load_mdlus(path);
    out.args = std::move(m.args);
    out.model_name = std::move(m.model_name);
    out.format = std::move(m.format);
    tensors = pick_state_dict(path, std::move(m.state_dict), out.notes);
  };
  if (has_zip_magic(head.data(), head.size())) {
    // An .mdlus and a torch archive are both zips; what is inside tells them apart.
    ZipArchive zip = ZipArchive::open_file(path);
    if (zip.contains("model.pt") && zip.contains("args.json")) {
      from_mdlus();
    } else {
      out.format = "torch-zip";
      tensors = pick_state_dict(path, read_torch_state_dict(zip), out.notes);
    }
  } else if (has_tar_magic(head.data(), head.size())) {
    from_mdlus();
  } else if (has_legacy_torch_magic(head.data(), head.size())) {
    load_torch_state_dict(path);  // raises the IoError that says how to re-save it
    weights_error(path, "legacy torch.save format");
  } else if (head.size() >= 9 && head[8] == '{') {
    out.format = "safetensors";
    tensors = load_safetensors(path).tensors();
  } else {
    weights_error(path, "is none of the formats ShardRT reads: safetensors, torch.save (.pt/.pth, zip) or PhysicsNeMo ",
                  ".mdlus (zip or tar)");
  }
  out.tensors = strip_wrapper_prefixes(path, std::move(tensors), out.notes);
  return out;
}

void save_weights(const std::string& path, const std::map<std::string, Tensor>& tensors) {
  save_safetensors(path, tensors);
}

}  // namespace shardrt
