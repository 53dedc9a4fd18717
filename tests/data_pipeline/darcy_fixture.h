// A small Darcy data set on disk for the data suite, and the serial oracle: the whole batch read with
// load_safetensors (every byte of every shard), which the sharded loader's windows are compared with.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/darcy_generator.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "runtime/safetensors.h"
#include "tests/support/world.h"

namespace shardrt::test {

// Each process writes its own copy (its own folder), so no rank waits for another's files.
inline std::string darcy_test_dir(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("shardrt_darcy_" + tag + "_" + std::to_string(::getpid())))
      .string();
}

// 11 x 11 (odd: rows split unevenly over 2, 3 and 4 ranks), 10 training samples in shards of 4, 4, 2.
inline data::DarcyConfig small_exact_config() {
  data::DarcyConfig c;
  c.mode = data::DarcyMode::exact;
  c.resolution = 11;
  c.seed = 7;
  c.relative_tolerance = 1e-10;
  return c;
}

// A folder removed when the process exits, so test runs leave nothing behind in the temp directory.
struct RemovedAtExit {
  std::string path;
  ~RemovedAtExit() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

inline const std::string& small_train_manifest() {
  static const RemovedAtExit dir{darcy_test_dir("loader")};
  static const std::string path =
      data::write_darcy_split(small_exact_config(), dir.path, "train", 0, 10, 4).manifest_path;
  return path;
}

// The whole (S, R, R) field of every sample of a split, in split order, as f64.
inline std::vector<std::vector<double>> serial_field(const std::string& manifest_path, const std::string& field) {
  const data::DarcyManifest m = data::load_darcy_manifest(manifest_path);
  std::vector<std::vector<double>> out;
  for (const auto& shard : m.shards) {
    const SafetensorsFile f = load_safetensors(shard.path);
    const Tensor t = f.get(field).to(DType::f64).contiguous();
    const int64_t n = m.resolution * m.resolution;
    for (int64_t s = 0; s < shard.samples; ++s)
      out.emplace_back(t.data<double>() + s * n, t.data<double>() + (s + 1) * n);
  }
  return out;
}

// The meshes a world size allows: 1-D over every rank, and every ddp x domain factorisation.
inline std::vector<std::pair<int, int>> mesh_shapes() {
  const int n = world_size();
  std::vector<std::pair<int, int>> out;
  for (int ddp = 1; ddp <= n; ++ddp)
    if (n % ddp == 0) out.push_back({ddp, n / ddp});
  return out;
}

}  // namespace shardrt::test
