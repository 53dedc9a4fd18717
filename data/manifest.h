// The manifest of one Darcy split (darcy_<split>.json, written by write_darcy_split): what the loader needs to
// find every sample without opening a shard first.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardrt::data {

struct ManifestShard {
  std::string path;  // absolute or relative to the working directory (resolved against the manifest's folder)
  int64_t samples = 0;
  int64_t first_sample = 0;  // the data set index of its first sample
};

struct DarcyManifest {
  std::string path;
  std::string split, mode;
  int64_t resolution = 0;
  uint64_t seed = 0;
  int64_t samples = 0;
  std::vector<ManifestShard> shards;
  nlohmann::json raw;  // the whole document (generator settings, solver residuals)

  // Which shard holds sample `i` (0-based within the split) and its row there.
  std::pair<size_t, int64_t> locate(int64_t i) const;
};

// IoError naming the file for a missing or unreadable file or a field that is absent, of the wrong type, or
// inconsistent (shard counts not adding up to `samples`).
DarcyManifest load_darcy_manifest(const std::string& path);

}  // namespace shardrt::data
