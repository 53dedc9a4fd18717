#include "data/manifest.h"

#include <filesystem>
#include <fstream>

#include "runtime/errors.h"

namespace shardrt::data {

std::pair<size_t, int64_t> DarcyManifest::locate(int64_t i) const {
  SHARDRT_CHECK(i >= 0 && i < samples, ValueError, "DarcyManifest: sample ", i, " is outside [0, ", samples, ") of ",
                path);
  int64_t start = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    if (i < start + shards[s].samples) return {s, i - start};
    start += shards[s].samples;
  }
  throw ValueError("DarcyManifest: sample " + std::to_string(i) + " is in no shard of " + path);
}

DarcyManifest load_darcy_manifest(const std::string& path) {
  std::ifstream in(path);
  SHARDRT_CHECK(in.good(), IoError, "load_darcy_manifest: cannot open '", path,
                "'; generate a data set with shardrt-darcy-gen --out DIR (it writes DIR/darcy_<split>.json)");
  DarcyManifest m;
  m.path = path;
  try {
    m.raw = nlohmann::json::parse(in);
    SHARDRT_CHECK(m.raw.value("format", "") == "shardrt-darcy", IoError, "load_darcy_manifest: '", path,
                  "' is not a shardrt-darcy manifest (its \"format\" is not \"shardrt-darcy\")");
    m.split = m.raw.at("split").get<std::string>();
    m.mode = m.raw.at("mode").get<std::string>();
    m.resolution = m.raw.at("resolution").get<int64_t>();
    m.seed = m.raw.at("seed").get<uint64_t>();
    m.samples = m.raw.at("samples").get<int64_t>();
    const std::filesystem::path folder = std::filesystem::path(path).parent_path();
    int64_t sum = 0;
    for (const auto& s : m.raw.at("shards")) {
      ManifestShard shard;
      shard.path = (folder / s.at("file").get<std::string>()).string();
      shard.samples = s.at("samples").get<int64_t>();
      shard.first_sample = s.value("first_sample", int64_t{0});
      SHARDRT_CHECK(shard.samples > 0, IoError, "load_darcy_manifest: '", path, "' lists shard ", shard.path,
                    " with ", shard.samples, " samples");
      sum += shard.samples;
      m.shards.push_back(shard);
    }
    SHARDRT_CHECK(sum == m.samples && m.resolution > 0, IoError, "load_darcy_manifest: '", path, "' states ",
                  m.samples, " samples at resolution ", m.resolution, " but its shards hold ", sum);
  } catch (const nlohmann::json::exception& e) {
    throw IoError("load_darcy_manifest: '" + path + "' is malformed: " + e.what());
  }
  return m;
}

}  // namespace shardrt::data
