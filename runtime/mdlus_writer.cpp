#include "runtime/mdlus_writer.h"

#include <zip.h>

#include <memory>
#include <set>

#include "runtime/errors.h"
#include "runtime/pickle_writer.h"

namespace shardrt {

namespace {

using json = nlohmann::json;

template <typename... Args>
[[noreturn]] void zip_write_error(const std::string& what, const Args&... args) {
  throw IoError(detail::concat("writing zip '", what, "': ", args...));
}

// A zip archive built in memory with every entry stored (no compression), as torch and PhysicsNeMo write theirs.
// Entry bytes are held until finish(), because libzip reads its sources only when the archive is closed.
class StoredZip {
 public:
  explicit StoredZip(std::string label) : label_(std::move(label)) {
    zip_error_t error;
    zip_error_init(&error);
    source_ = zip_source_buffer_create(nullptr, 0, 0, &error);
    if (source_ == nullptr) zip_write_error(label_, zip_error_strerror(&error));
    archive_ = zip_open_from_source(source_, ZIP_TRUNCATE, &error);
    if (archive_ == nullptr) {
      zip_source_free(source_);
      zip_write_error(label_, zip_error_strerror(&error));
    }
    zip_source_keep(source_);  // survives zip_close, so the bytes can be read back
  }
  ~StoredZip() {
    if (archive_ != nullptr) zip_discard(archive_);
    if (source_ != nullptr) zip_source_free(source_);
  }
  StoredZip(const StoredZip&) = delete;
  StoredZip& operator=(const StoredZip&) = delete;

  void add(const std::string& name, std::vector<unsigned char> bytes) {
    held_.push_back(std::make_unique<std::vector<unsigned char>>(std::move(bytes)));
    const auto& data = *held_.back();
    zip_source_t* entry = zip_source_buffer(archive_, data.empty() ? nullptr : data.data(), data.size(), 0);
    if (entry == nullptr) zip_write_error(label_, "entry '", name, "': ", zip_strerror(archive_));
    const zip_int64_t index = zip_file_add(archive_, name.c_str(), entry, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(entry);
      zip_write_error(label_, "entry '", name, "': ", zip_strerror(archive_));
    }
    if (zip_set_file_compression(archive_, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0) != 0)
      zip_write_error(label_, "entry '", name, "': ", zip_strerror(archive_));
  }
  void add(const std::string& name, const std::string& text) { add(name, std::vector<unsigned char>(text.begin(), text.end())); }

  std::vector<unsigned char> finish() {
    if (zip_close(archive_) != 0) zip_write_error(label_, zip_strerror(archive_));
    archive_ = nullptr;
    held_.clear();
    if (zip_source_open(source_) != 0) zip_write_error(label_, zip_error_strerror(zip_source_error(source_)));
    zip_source_seek(source_, 0, SEEK_END);
    const zip_int64_t size = zip_source_tell(source_);
    zip_source_seek(source_, 0, SEEK_SET);
    if (size < 0) zip_write_error(label_, "cannot size the archive");
    std::vector<unsigned char> out(static_cast<std::size_t>(size));
    const zip_int64_t got = size == 0 ? 0 : zip_source_read(source_, out.data(), static_cast<zip_uint64_t>(size));
    zip_source_close(source_);
    if (got != size) zip_write_error(label_, "read back ", got, " of ", size, " bytes");
    return out;
  }

 private:
  std::string label_;
  zip_source_t* source_ = nullptr;
  zip_t* archive_ = nullptr;
  std::vector<std::unique_ptr<std::vector<unsigned char>>> held_;
};

std::vector<unsigned char> tensor_bytes(const Tensor& t) {
  const Tensor host = t.contiguous().to(Device::cpu());
  const auto* p = static_cast<const unsigned char*>(host.raw_data());
  return std::vector<unsigned char>(p, p + host.nbytes());
}

}  // namespace

std::vector<unsigned char> torch_zip_bytes(const OrderedTensors& state_dict, const std::string& archive) {
  SHARDRT_CHECK(!archive.empty() && archive.find('/') == std::string::npos, ValueError, "torch_zip_bytes: archive name '",
                archive, "' must be one non-empty path component");
  std::set<std::string> seen;
  std::vector<PickledStateEntry> entries;
  for (std::size_t i = 0; i < state_dict.size(); ++i) {
    const auto& [key, t] = state_dict[i];
    SHARDRT_CHECK(!key.empty(), ValueError, "torch_zip_bytes: entry ", i, " has an empty key");
    SHARDRT_CHECK(seen.insert(key).second, ValueError, "torch_zip_bytes: key '", key, "' appears twice");
    SHARDRT_CHECK(t.defined(), ValueError, "torch_zip_bytes: tensor '", key, "' is undefined");
    entries.push_back({key, t.dtype(), t.shape(), std::to_string(i)});
  }
  StoredZip zip(archive + ".pt");
  zip.add(archive + "/data.pkl", pickle_state_dict(entries));
  zip.add(archive + "/.format_version", std::string("1"));
  zip.add(archive + "/byteorder", std::string("little"));
  for (std::size_t i = 0; i < state_dict.size(); ++i)
    zip.add(archive + "/data/" + std::to_string(i), tensor_bytes(state_dict[i].second));
  zip.add(archive + "/version", std::string("3\n"));
  return zip.finish();
}

std::vector<unsigned char> mdlus_bytes(const OrderedTensors& state_dict, const json& args, const json& metadata) {
  SHARDRT_CHECK(args.is_object() && args.contains("__name__") && args["__name__"].is_string() &&
                    args.contains("__module__") && args["__module__"].is_string() && args.contains("__args__") &&
                    args["__args__"].is_object(),
                ValueError, "mdlus_bytes: args must be {\"__name__\": str, \"__module__\": str, \"__args__\": {...}} ",
                "as PhysicsNeMo's args.json, got ", args.dump().substr(0, 200));
  json meta = metadata;
  if (meta.is_null()) meta = {{"mdlus_file_version", kMdlusFileVersion}, {"exported_by", "ShardRT"}};
  SHARDRT_CHECK(meta.is_object(), ValueError, "mdlus_bytes: metadata must be a JSON object, got ", meta.type_name());
  StoredZip zip("model.mdlus");
  zip.add("model.pt", torch_zip_bytes(state_dict, "archive"));
  zip.add("args.json", args.dump());
  zip.add("metadata.json", meta.dump());
  return zip.finish();
}

}  // namespace shardrt
