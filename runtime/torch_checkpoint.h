// Reading PyTorch checkpoints (.pt/.pth written by torch.save, torch >= 1.6 zip format) and PhysicsNeMo .mdlus
// files (a zip, or in the legacy format a tar, of model.pt + args.json + metadata.json), without Python.
//
// A torch checkpoint is a zip of <archive>/data.pkl (a pickle of the saved object, read by the restricted
// unpickler in runtime/torch_pickle.h, which executes nothing), <archive>/data/<key> (the raw little-endian bytes
// of each storage), <archive>/byteorder and version files. Tensors are strided views of storages; each is checked
// against its storage (offset + extent within the storage's elements, the entry exactly numel x element bytes,
// bool bytes 0 or 1) and returned as a contiguous CPU tensor. Views that were contiguous in the file share the
// loaded storage, as they did when saved; others are copied.
// Every problem is an IoError naming the file (and the key or entry) and what is wrong.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/tensor.h"
#include "runtime/zip_archive.h"

namespace shardrt {

// The dict a torch checkpoint holds. A plain state dict has only tensors; a training checkpoint
// ({"epoch": 3, "model_state_dict": {...}, "optimizer_state_dict": {...}}) nests string-keyed dicts, whose
// tensors are loaded too. Values of any other kind (numbers, strings, lists, dicts with non-string keys such as an
// optimizer's per-parameter state) are only named in other_keys, and tensors inside them are not loaded.
struct TorchStateDict {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::shared_ptr<TorchStateDict>> dicts;
  std::vector<std::string> other_keys;
  std::vector<std::string> keys;  // every key, in the file's order
};

// Loads a .pt/.pth file. A file in the legacy (pre-1.6) torch.save format is an IoError saying how to re-save it.
TorchStateDict load_torch_state_dict(const std::string& path);
// The same for a torch zip archive already open (an .mdlus's model.pt, opened from memory).
TorchStateDict read_torch_state_dict(const ZipArchive& archive);

// A PhysicsNeMo checkpoint, as Module.save writes it.
struct MdlusCheckpoint {
  TorchStateDict state_dict;   // model.pt
  nlohmann::json args;         // args.json: {"__name__", "__module__", "__args__": the constructor arguments}
  nlohmann::json metadata;     // metadata.json ({"physicsnemo_version", "mdlus_file_version"}); null when absent
  std::string model_name;      // args["__name__"], e.g. "FLARE"
  std::string model_module;    // args["__module__"], e.g. "physicsnemo.models.flare.flare"
  std::string format;          // "mdlus-zip" or "mdlus-tar"
};

MdlusCheckpoint load_mdlus(const std::string& path);

// The first bytes of a file in the legacy torch.save format: a pickle (protocol 2) of torch's magic number.
bool has_legacy_torch_magic(const unsigned char* bytes, std::size_t n);

}  // namespace shardrt
