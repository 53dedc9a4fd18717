// The index of a sharded checkpoint (index.json, see optim/checkpoint.h): what it records, how it is written, and
// the validation a load runs on it before touching any data file.
//
//   {"format": "shardrt-checkpoint", "version": 1,
//    "mesh": {"axes": ["ddp", "domain"], "shape": [4, 1]},
//    "state": {...},
//    "files": [{"name": "rank-00000.safetensors", "bytes": 1234}, ...],      // one per saving rank, by rank
//    "tensors": {"param.w": {"dtype": "f32", "shape": [3, 5],
//                            "pieces": [{"file": 0, "key": "param.w@0", "begin": 0, "count": 8, "crc32": 123}, ...]}}}
//
// Pieces are listed by begin; "file" indexes "files". A tensor's pieces need not cover it (a load asks for what it
// needs and names a missing range), but they never overlap.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace shardrt::checkpoint_index {

struct Piece {
  int file = 0;  // index into Index::files
  std::string key;
  int64_t begin = 0;
  int64_t count = 0;
  uint32_t crc32 = 0;
};

struct TensorEntry {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  std::vector<Piece> pieces;  // by begin, disjoint
};

struct FileEntry {
  std::string name;
  uint64_t bytes = 0;
};

struct Index {
  std::vector<std::string> mesh_axes;
  std::vector<int> mesh_shape;
  nlohmann::json state;
  std::vector<FileEntry> files;
  std::map<std::string, TensorEntry> tensors;
};

// The file rank `rank` writes.
std::string rank_file_name(int rank);
// The key of a piece inside its file.
std::string piece_key(const std::string& name, int64_t begin);

nlohmann::json to_json(const Index& index);
// Parses and validates index.json of checkpoint `dir` (named in every IoError).
Index parse(const std::string& dir, const std::string& text);

// The product of `shape` (ValueError naming `what` when negative or past int64).
int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& what);

}  // namespace shardrt::checkpoint_index
