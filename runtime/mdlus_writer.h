// Writing the containers PyTorch and PhysicsNeMo read: a torch.save zip archive of a state dict, and a PhysicsNeMo
// .mdlus around one. Both are produced as bytes (the caller writes them durably: optim/checkpoint.h's exports).
//
// Torch archive (what torch.save writes and torch.load reads, all entries stored uncompressed):
//   <archive>/data.pkl         the OrderedDict, pickled by runtime/pickle_writer.h
//   <archive>/.format_version  "1"
//   <archive>/byteorder        "little"
//   <archive>/data/<n>         the raw little-endian bytes of the n-th tensor (in key order), contiguous
//   <archive>/version          "3"
// Entries are not padded to 64 bytes as torch's own writer does, so torch.load(mmap=True) of a big file copies
// instead of mapping; a plain torch.load does not care.
//
// .mdlus (PhysicsNeMo's Module.save layout, ZIP_STORED): model.pt (the torch archive above, archive "archive"),
// args.json ({"__name__", "__module__", "__args__"}), metadata.json ({"mdlus_file_version": "0.1.0", ...}).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace shardrt {

using OrderedTensors = std::vector<std::pair<std::string, Tensor>>;

// The .mdlus file version PhysicsNeMo 2.x writes and expects of its models.
inline constexpr const char* kMdlusFileVersion = "0.1.0";

// The bytes of a torch.save zip of `state_dict` (any device, any strides: written as contiguous CPU bytes).
// ValueError for an empty or repeated key or an undefined tensor.
std::vector<unsigned char> torch_zip_bytes(const OrderedTensors& state_dict, const std::string& archive = "archive");

// The bytes of a .mdlus. `args` must be an object with a string "__name__" and "__module__" and an object
// "__args__" (ValueError otherwise). `metadata` null: {"mdlus_file_version": kMdlusFileVersion, "exported_by": ...}.
std::vector<unsigned char> mdlus_bytes(const OrderedTensors& state_dict, const nlohmann::json& args,
                                       const nlohmann::json& metadata = nullptr);

}  // namespace shardrt
