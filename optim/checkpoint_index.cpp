#include "optim/checkpoint_index.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "optim/checkpoint.h"
#include "runtime/errors.h"
#include "runtime/shape.h"

namespace shardrt::checkpoint_index {

namespace {

using json = nlohmann::json;

constexpr const char* kFormat = kCheckpointFormatName;
constexpr int kVersion = kCheckpointFormatVersion;

// A sane bound for counts read from the file: no index lists more files or pieces than this.
constexpr std::size_t kMaxEntries = 100'000'000;

template <typename... Args>
[[noreturn]] void bad_index(const std::string& dir, const Args&... args) {
  throw IoError(detail::concat("load_checkpoint: '", dir, "/index.json': ", args...,
                               " (the index is damaged or not ShardRT's: restore the checkpoint or save it again)"));
}

const json& field(const std::string& dir, const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object()) bad_index(dir, where, " is ", obj.type_name(), ", expected an object");
  auto it = obj.find(key);
  if (it == obj.end()) bad_index(dir, where, " has no \"", key, "\"");
  return *it;
}

int64_t non_negative(const std::string& dir, const json& v, const std::string& where) {
  if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(v.get<uint64_t>());
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  bad_index(dir, where, " is ", v.dump(), ", expected a non-negative integer");
}

const std::string& text(const std::string& dir, const json& v, const std::string& where) {
  if (!v.is_string()) bad_index(dir, where, " is ", v.type_name(), ", expected a string");
  return v.get_ref<const std::string&>();
}

}  // namespace

std::string rank_file_name(int rank) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
  return buf;
}

std::string piece_key(const std::string& name, int64_t begin) { return name + "@" + std::to_string(begin); }

int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    SHARDRT_CHECK(d >= 0, ValueError, what, ": global shape ", shape_str(shape), " has a negative size");
    SHARDRT_CHECK(!__builtin_mul_overflow(n, d, &n), ValueError, what, ": global shape ", shape_str(shape),
                  " has more elements than int64 counts");
  }
  return n;
}

json to_json(const Index& index) {
  json files = json::array();
  for (const FileEntry& f : index.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}});
  json tensors = json::object();
  for (const auto& [name, t] : index.tensors) {
    json pieces = json::array();
    for (const Piece& p : t.pieces)
      pieces.push_back({{"file", p.file}, {"key", p.key}, {"begin", p.begin}, {"count", p.count}, {"crc32", p.crc32}});
    tensors[name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"pieces", std::move(pieces)}};
  }
  return {{"format", kFormat},
          {"version", kVersion},
          {"mesh", {{"axes", index.mesh_axes}, {"shape", index.mesh_shape}}},
          {"state", index.state},
          {"files", std::move(files)},
          {"tensors", std::move(tensors)}};
}

Index parse(const std::string& dir, const std::string& body) {
  json doc;
  try {
    doc = json::parse(body);
  } catch (const json::exception& e) {
    bad_index(dir, "not valid JSON: ", e.what());
  }
  if (!doc.is_object()) bad_index(dir, "is ", doc.type_name(), ", expected an object");
  if (text(dir, field(dir, doc, "format", "the index"), "\"format\"") != kFormat)
    bad_index(dir, "\"format\" is ", doc["format"].dump(), ", expected \"", kFormat, "\"");
  const json& version = field(dir, doc, "version", "the index");
  if (!version.is_number_integer() || version.get<int64_t>() != kVersion)
    bad_index(dir, "format version ", version.dump(), " is not the version this build reads (", kVersion, ")");

  Index index;
  const json& mesh = field(dir, doc, "mesh", "the index");
  const json& axes = field(dir, mesh, "axes", "\"mesh\"");
  const json& shape = field(dir, mesh, "shape", "\"mesh\"");
  if (!axes.is_array() || !shape.is_array() || axes.size() != shape.size())
    bad_index(dir, "\"mesh\" needs \"axes\" and \"shape\" arrays of one length");
  int64_t ranks = 1;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    index.mesh_axes.push_back(text(dir, axes[i], "a mesh axis name"));
    const int64_t n = non_negative(dir, shape[i], "a mesh size");
    if (n < 1 || n > (1 << 24)) bad_index(dir, "mesh size ", n, " is out of range");
    index.mesh_shape.push_back(static_cast<int>(n));
    ranks *= n;
    if (ranks > (1 << 24)) bad_index(dir, "the mesh ", shape.dump(), " has too many ranks");
  }
  index.state = field(dir, doc, "state", "the index");

  const json& files = field(dir, doc, "files", "the index");
  if (!files.is_array() || files.size() > kMaxEntries) bad_index(dir, "\"files\" is not an array of files");
  if (static_cast<int64_t>(files.size()) != ranks)
    bad_index(dir, "lists ", files.size(), " files for a mesh of ", ranks, " ranks");
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string where = detail::concat("file ", i);
    FileEntry f{text(dir, field(dir, files[i], "name", where), where + " name"),
                static_cast<uint64_t>(non_negative(dir, field(dir, files[i], "bytes", where), where + " bytes"))};
    // Only the names save writes: a name reaching outside the directory would read another file.
    if (f.name != rank_file_name(static_cast<int>(i)))
      bad_index(dir, where, " is named '", f.name, "', expected '", rank_file_name(static_cast<int>(i)), "'");
    index.files.push_back(std::move(f));
  }

  const json& tensors = field(dir, doc, "tensors", "the index");
  if (!tensors.is_object()) bad_index(dir, "\"tensors\" is ", tensors.type_name(), ", expected an object");
  for (const auto& [name, entry] : tensors.items()) {
    const std::string where = "tensor '" + name + "'";
    TensorEntry t;
    const std::string& dtype = text(dir, field(dir, entry, "dtype", where), where + " dtype");
    try {
      t.dtype = dtype_from_name(dtype);
    } catch (const ValueError&) {
      bad_index(dir, where, ": unknown dtype '", dtype, "'");
    }
    const json& tshape = field(dir, entry, "shape", where);
    if (!tshape.is_array() || tshape.size() > 64) bad_index(dir, where, ": \"shape\" is not an array of sizes");
    for (const json& d : tshape) t.shape.push_back(non_negative(dir, d, where + " shape entry"));
    try {
      t.numel = checked_numel(t.shape, where);
    } catch (const ValueError& e) {
      bad_index(dir, e.what());
    }
    const json& pieces = field(dir, entry, "pieces", where);
    if (!pieces.is_array() || pieces.size() > kMaxEntries) bad_index(dir, where, ": \"pieces\" is not an array");
    for (const json& pj : pieces) {
      Piece p;
      const int64_t file = non_negative(dir, field(dir, pj, "file", where + " piece"), where + " piece file");
      if (file >= static_cast<int64_t>(index.files.size()))
        bad_index(dir, where, ": a piece names file ", file, " of ", index.files.size());
      p.file = static_cast<int>(file);
      p.key = text(dir, field(dir, pj, "key", where + " piece"), where + " piece key");
      p.begin = non_negative(dir, field(dir, pj, "begin", where + " piece"), where + " piece begin");
      p.count = non_negative(dir, field(dir, pj, "count", where + " piece"), where + " piece count");
      const int64_t crc = non_negative(dir, field(dir, pj, "crc32", where + " piece"), where + " piece crc32");
      if (crc > 0xFFFFFFFFll) bad_index(dir, where, ": crc32 ", crc, " does not fit 32 bits");
      p.crc32 = static_cast<uint32_t>(crc);
      if (p.count > t.numel || p.begin > t.numel - p.count)
        bad_index(dir, where, ": piece [", p.begin, ", ", p.begin + p.count, ") lies outside its ", t.numel,
                  " elements");
      t.pieces.push_back(std::move(p));
    }
    std::sort(t.pieces.begin(), t.pieces.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
    for (std::size_t i = 1; i < t.pieces.size(); ++i) {
      const Piece &a = t.pieces[i - 1], &b = t.pieces[i];
      if (a.count > 0 && b.count > 0 && b.begin < a.begin + a.count)
        bad_index(dir, where, ": pieces [", a.begin, ", ", a.begin + a.count, ") and [", b.begin, ", ",
                  b.begin + b.count, ") overlap");
    }
    index.tensors.emplace(name, std::move(t));
  }
  return index;
}

}  // namespace shardrt::checkpoint_index
