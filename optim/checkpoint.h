// Sharded, resharding, atomic checkpoints of what an optimizer owns, and the consolidated PhysicsNeMo exports.
//
// A checkpoint is a directory (docs/checkpoints.md, "Sharded checkpoints"):
//   <dir>/rank-00000.safetensors ...  one per rank of the saving mesh: that rank's pieces, each a 1-D tensor keyed
//                                     "<name>@<begin>" (a rank that owns nothing writes an empty file)
//   <dir>/index.json                  written last, by rank 0: format, version, the saving mesh, the state JSON, every
//                                     file with its byte length, and per tensor its dtype, global shape and pieces
//                                     (file, key, begin, count, crc32 of the piece's bytes)
//
// Save protocol (collective over mesh.flat(); every step's verdict is agreed, so a failure anywhere fails the save on
// every rank, with the same message, and nothing half written is ever at <dir>):
//   1. every rank checks its own ranges (agreed: ValueError); then rank 0 refuses a <dir> that exists and is
//      neither empty nor a ShardRT checkpoint, since it would be replaced (agreed: IoError);
//   2. rank 0 picks a nonce, creates <dir>.tmp-<nonce>/ (agreed: IoError);
//   3. every rank writes its file there (temporary name, fsync, rename, directory fsync) (agreed: IoError);
//   4. the pieces' descriptions are all-gathered; every rank checks the same thing (one dtype and global shape per
//      name, no element written twice) (ValueError, identical on every rank);
//   5. rank 0 writes index.json (fsync), fsyncs the directory, and commits: renameat2(RENAME_EXCHANGE) swaps the new
//      directory with the previous checkpoint in one atomic step (a plain rename when there was none), the parent
//      directory is fsynced, and the previous checkpoint — now under the temporary name — is removed, with any
//      leftovers of earlier interrupted saves of <dir> (agreed: IoError).
//   Where the filesystem cannot exchange, the previous checkpoint is first renamed to <dir>.old-<nonce>, then the new
//   one into place; a crash between the two renames leaves no <dir> but a complete <dir>.old-<nonce>.
// What a reader does with leftovers: it reads <dir> only. A <dir>.tmp-<nonce> is a save that never committed, or
// the previous checkpoint of a commit killed before removing it; it is never read, and a later successful save of
// the same <dir> removes it. When <dir> is missing, the load error
// names any <dir>.old-<nonce> it finds (rename it back to <dir> to use it). One job saves a given <dir> at a time.
//
// Load (collective over mesh.flat(), any mesh, any split): each request is answered from the saved pieces that
// intersect it, reading only the files holding those pieces. The index is validated whole (format, version, dtypes,
// shapes, pieces inside their tensors and not overlapping, file references), and each file used against it (its
// length, its safetensors header against the file length, each piece's key, dtype, length and crc32). A request not
// covered by the pieces is an IoError naming the missing element range. Any failure is agreed: every rank throws
// the same IoError.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mesh/mesh.h"
#include "runtime/tensor.h"

namespace shardrt {

// The index's "version"; a reader refuses any other.
inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr const char* kCheckpointFormatName = "shardrt-checkpoint";
inline constexpr const char* kCheckpointIndexName = "index.json";

// One rank's piece of one named global tensor: a flat, row-major element range [begin, begin + values.numel()).
struct SavedRange {
  std::string name;                   // "param.<state_dict key>", "<state name>.<state_dict key>"
  std::vector<int64_t> global_shape;  // the whole tensor's shape
  int64_t begin = 0;                  // first flat element held here
  Tensor values;                      // 1-D (dtype = the saved dtype); copied to the CPU when it is elsewhere
};

struct CheckpointContents {
  std::vector<SavedRange> ranges;  // what THIS rank owns and writes (no two ranks write the same element)
  nlohmann::json state;            // step counters, schedule state, RNG offsets, config, mesh shape, mode; rank 0's is kept
};

// Collective over mesh.flat(). Writes <dir> atomically (see above); keeps the previous checkpoint until the new one
// is complete. Bad ranges are a ValueError, I/O failures an IoError, on every rank.
void save_checkpoint(const Mesh& mesh, const std::string& dir, const CheckpointContents& mine);

struct RangeRequest {
  std::string name;
  int64_t begin = 0;
  int64_t count = 0;
  // When set, the saved tensor must have exactly this dtype / global shape (IoError otherwise).
  std::optional<DType> dtype = std::nullopt;
  std::optional<std::vector<int64_t>> global_shape = std::nullopt;
};

struct LoadedCheckpoint {
  std::vector<Tensor> values;  // values[i] answers requests[i]: 1-D, count elements, the saved dtype, CPU
  nlohmann::json state;        // as saved by rank 0
};

// Collective over mesh.flat(); each rank passes its own requests (any number, any ranges).
LoadedCheckpoint load_checkpoint(const Mesh& mesh, const std::string& dir, const std::vector<RangeRequest>& requests);

// What a checkpoint holds, from its index alone (validated as load does; not collective).
struct CheckpointTensorInfo {
  DType dtype = DType::f32;
  std::vector<int64_t> global_shape;
};
struct CheckpointInfo {
  std::map<std::string, CheckpointTensorInfo> tensors;
  nlohmann::json state;
  std::vector<int> mesh_shape;  // of the mesh that saved it
};
CheckpointInfo read_checkpoint_info(const std::string& dir);

// Consolidated exports keyed exactly as PhysicsNeMo (full tensors). Not collective: one rank calls them.
// export_safetensors: a safetensors file, as load_weights and safetensors.torch.load_file read it.
// export_mdlus: a PhysicsNeMo .mdlus (ZIP_STORED: model.pt = a torch.save zip of an OrderedDict state dict in
// `key_order`, args.json = `args` ({"__name__", "__module__", "__args__"}), metadata.json). key_order must list every
// key of state_dict exactly once (ValueError otherwise). Both write a temporary file, fsync it and rename it.
void export_safetensors(const std::string& path, const std::map<std::string, Tensor>& state_dict);
void export_mdlus(const std::string& path, const std::map<std::string, Tensor>& state_dict,
                  const std::vector<std::string>& key_order, const nlohmann::json& args);
// export_torch: a .pt as torch.save(OrderedDict(state_dict in key_order)) writes it (torch.load opens it).
void export_torch(const std::string& path, const std::map<std::string, Tensor>& state_dict,
                  const std::vector<std::string>& key_order);

}  // namespace shardrt
