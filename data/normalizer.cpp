#include "data/normalizer.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "data/manifest.h"
#include "data/shard_reader.h"
#include "patches/shard_spec.h"
#include "runtime/errors.h"
#include "runtime/factories.h"

namespace shardrt::data {

const FieldStats& Normalizer::field(const std::string& name) const {
  if (name == "permeability") return permeability;
  if (name == "darcy") return darcy;
  throw ValueError("Normalizer: unknown field '" + name + "'; the fields are permeability and darcy");
}

template <typename T>
void Normalizer::normalize(const std::string& field_name, T* data, int64_t count) const {
  const FieldStats& f = field(field_name);
  const T mean = static_cast<T>(f.mean), inv = static_cast<T>(1.0 / f.std);
  for (int64_t i = 0; i < count; ++i) data[i] = (data[i] - mean) * inv;
}
template void Normalizer::normalize<float>(const std::string&, float*, int64_t) const;
template void Normalizer::normalize<double>(const std::string&, double*, int64_t) const;

namespace {
template <typename Fn>
void for_floating(const char* op, Tensor& t, Fn&& fn) {
  SHARDRT_CHECK(t.device().is_cpu() && t.is_contiguous(), DeviceError, "Normalizer::", op,
                ": needs a contiguous CPU tensor, got ", t.str());
  if (t.dtype() == DType::f32)
    fn(t.data<float>());
  else if (t.dtype() == DType::f64)
    fn(t.data<double>());
  else
    throw DTypeError(std::string("Normalizer::") + op + ": needs an f32 or f64 tensor, got " + t.str());
}
}  // namespace

void Normalizer::normalize(const std::string& field_name, Tensor& t) const {
  for_floating("normalize", t, [&](auto* p) { normalize(field_name, p, t.numel()); });
}

void Normalizer::denormalize(const std::string& field_name, Tensor& t) const {
  const FieldStats& f = field(field_name);
  for_floating("denormalize", t, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] * static_cast<T>(f.std) + static_cast<T>(f.mean);
  });
}

nlohmann::json Normalizer::to_json() const {
  return {{"permeability", {{"mean", permeability.mean}, {"std", permeability.std}}},
          {"darcy", {{"mean", darcy.mean}, {"std", darcy.std}}}};
}

Normalizer Normalizer::from_json(const nlohmann::json& j) {
  Normalizer n;
  try {
    for (const char* name : {"permeability", "darcy"}) {
      FieldStats& f = std::string(name) == "darcy" ? n.darcy : n.permeability;
      f.mean = j.at(name).at("mean").get<double>();
      f.std = j.at(name).at("std").get<double>();
      SHARDRT_CHECK(f.std > 0 && std::isfinite(f.std) && std::isfinite(f.mean), IoError, "Normalizer: field '",
                    name, "' has mean ", f.mean, " std ", f.std, "; std must be positive and both finite");
    }
  } catch (const nlohmann::json::exception& e) {
    throw IoError(std::string("Normalizer: expected {\"permeability\": {\"mean\", \"std\"}, \"darcy\": {...}}: ") +
                  e.what());
  }
  return n;
}

void Normalizer::save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << to_json().dump(2) << "\n";
    SHARDRT_CHECK(out.good(), IoError, "Normalizer::save: cannot write '", tmp, "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  SHARDRT_CHECK(!ec, IoError, "Normalizer::save: cannot rename '", tmp, "' to '", path, "': ", ec.message());
}

Normalizer Normalizer::load(const std::string& path) {
  std::ifstream in(path);
  SHARDRT_CHECK(in.good(), IoError, "Normalizer::load: cannot open '", path, "'");
  try {
    return from_json(nlohmann::json::parse(in));
  } catch (const nlohmann::json::exception& e) {
    throw IoError("Normalizer::load: '" + path + "' is not JSON: " + e.what());
  } catch (const IoError& e) {
    throw IoError(std::string(e.what()) + " (in '" + path + "')");
  }
}

std::map<std::string, Tensor> Normalizer::state() const {
  auto scalar = [](double v) { return from_vector({v}, {1}, {DType::f64}); };
  return {{"normalizer.permeability.mean", scalar(permeability.mean)},
          {"normalizer.permeability.std", scalar(permeability.std)},
          {"normalizer.darcy.mean", scalar(darcy.mean)},
          {"normalizer.darcy.std", scalar(darcy.std)}};
}

Normalizer Normalizer::from_state(const std::map<std::string, Tensor>& state) {
  auto get = [&](const std::string& key) {
    auto it = state.find(key);
    SHARDRT_CHECK(it != state.end(), IoError, "Normalizer::from_state: the state has no '", key,
                  "' (written by Normalizer::state)");
    SHARDRT_CHECK(it->second.numel() == 1, IoError, "Normalizer::from_state: '", key, "' is ", it->second.str(),
                  ", expected one value");
    return it->second.to(Device::cpu()).to(DType::f64).contiguous().data<double>()[0];
  };
  nlohmann::json j = {{"permeability", {{"mean", get("normalizer.permeability.mean")},
                                        {"std", get("normalizer.permeability.std")}}},
                      {"darcy", {{"mean", get("normalizer.darcy.mean")}, {"std", get("normalizer.darcy.std")}}}};
  return from_json(j);
}

Normalizer compute_normalizer(const std::string& manifest_path, const Mesh& mesh, std::shared_ptr<ByteCounter> counter) {
  const DarcyManifest m = load_darcy_manifest(manifest_path);
  if (!counter) counter = std::make_shared<ByteCounter>();
  const int64_t H = m.resolution, W = m.resolution;
  // This rank's rows of the sample-major stack of every sample's rows.
  const Extents ext = split_extents(m.samples * H, mesh.size());
  int64_t begin = 0;
  for (int r = 0; r < mesh.rank(); ++r) begin += ext[static_cast<size_t>(r)];
  const int64_t end = begin + ext[static_cast<size_t>(mesh.rank())];

  Tensor sums = zeros({4}, {DType::f64});
  double* acc = sums.data<double>();
  std::vector<double> row(static_cast<size_t>(W));
  std::vector<std::unique_ptr<ShardFile>> files(m.shards.size());
  for (int64_t g = begin; g < end; ++g) {
    const auto [shard, local] = m.locate(g / H);
    if (!files[shard]) files[shard] = std::make_unique<ShardFile>(m.shards[shard].path, counter);
    const int64_t r = g % H;
    int slot = 0;
    for (const char* name : {"permeability", "darcy"}) {
      files[shard]->read_window<double>(name, local, r, 1, 0, W, row.data(), W);
      for (double v : row) acc[slot] += v, acc[slot + 1] += v * v;
      slot += 2;
    }
  }
  mesh.flat().all_reduce(sums);
  const double count = static_cast<double>(m.samples * H * W);
  auto stats = [&](int slot) {
    FieldStats f;
    f.mean = acc[slot] / count;
    f.std = std::sqrt(std::max(acc[slot + 1] / count - f.mean * f.mean, 0.0));
    SHARDRT_CHECK(f.std > 0, ValueError, "compute_normalizer: field ", slot == 0 ? "permeability" : "darcy", " of ",
                  manifest_path, " is constant (", f.mean, "): its std is 0 and it cannot be normalised");
    return f;
  };
  Normalizer n;
  n.permeability = stats(0);
  n.darcy = stats(2);
  return n;
}

}  // namespace shardrt::data
