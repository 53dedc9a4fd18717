#include "runtime/torch_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <string_view>

#include "runtime/errors.h"
#include "runtime/storage.h"
#include "runtime/tar_archive.h"
#include "runtime/torch_pickle.h"

namespace shardrt {

namespace {

using json = nlohmann::json;
using Kind = PickleValue::Kind;

// data.pkl describes structure only (the tensors' bytes are separate entries): a few kilobytes per thousand
// tensors. args.json / metadata.json are small JSON objects.
constexpr uint64_t kMaxPickleBytes = 1ull << 30;
constexpr uint64_t kMaxJsonBytes = 64ull << 20;
// model.pt inside an .mdlus is read into memory; its size is already bounded by the archive (see ZipArchive), and
// this bounds it once more for tar members.
constexpr uint64_t kMaxModelBytes = 1ull << 40;
constexpr int kMaxTensorDims = 64;

template <typename... Args>
[[noreturn]] void checkpoint_error(const std::string& label, const Args&... args) {
  throw IoError(detail::concat("torch checkpoint '", label, "': ", args...));
}

// How each storage type's elements are read. Short and Char storages (int16, int8) are valid torch files whose
// dtype the runtime does not have.
struct StorageDType {
  std::string_view storage_type;
  const char* torch_name;
  std::optional<DType> dtype;
  std::size_t element_bytes;
};
const StorageDType kStorageDTypes[] = {
    {"DoubleStorage", "torch.float64", DType::f64, 8},     {"FloatStorage", "torch.float32", DType::f32, 4},
    {"HalfStorage", "torch.float16", DType::f16, 2},       {"BFloat16Storage", "torch.bfloat16", DType::bf16, 2},
    {"LongStorage", "torch.int64", DType::i64, 8},         {"IntStorage", "torch.int32", DType::i32, 4},
    {"ShortStorage", "torch.int16", std::nullopt, 2},      {"CharStorage", "torch.int8", std::nullopt, 1},
    {"ByteStorage", "torch.uint8", DType::u8, 1},          {"BoolStorage", "torch.bool", DType::boolean, 1},
    {"UntypedStorage", "torch.uint8 (untyped)", DType::u8, 1},
};

const StorageDType& storage_dtype(const std::string& label, const std::string& storage_type) {
  for (const StorageDType& d : kStorageDTypes)
    if (d.storage_type == storage_type) return d;
  checkpoint_error(label, "unknown storage type '", storage_type, "'");  // the unpickler admits only the above
}

std::string shape_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The entries of one torch zip archive, loaded on demand and once per storage key (views share a storage).
class StorageReader {
 public:
  StorageReader(const ZipArchive& zip, std::string prefix) : zip_(zip), prefix_(std::move(prefix)) {}

  Tensor tensor(const std::string& key, const PickledTensor& t) {
    const std::string& label = zip_.label();
    const PickledStorage& s = *t.storage;
    const StorageDType& kind = storage_dtype(label, s.storage_type);
    if (!kind.dtype)
      checkpoint_error(label, "tensor '", key, "' has dtype ", kind.torch_name, ", which ShardRT does not support ",
                       "(supported: float64, float32, float16, bfloat16, int64, int32, uint8, bool); convert it in ",
                       "PyTorch (e.g. .to(torch.int32)) and save again");
    const DType dtype = *kind.dtype;

    // Geometry: sizes and strides of one rank, nothing negative, and every addressed element inside the storage.
    if (t.size.size() != t.stride.size())
      checkpoint_error(label, "tensor '", key, "': size ", shape_text(t.size), " and stride ", shape_text(t.stride),
                       " differ in rank");
    if (t.size.size() > kMaxTensorDims)
      checkpoint_error(label, "tensor '", key, "' has ", t.size.size(), " dimensions, more than ", kMaxTensorDims);
    if (t.storage_offset < 0) checkpoint_error(label, "tensor '", key, "': negative storage offset ", t.storage_offset);
    int64_t numel = 1, last = t.storage_offset;  // `last`: the storage index of the last element addressed
    bool overflow = false;
    for (std::size_t d = 0; d < t.size.size(); ++d) {
      if (t.size[d] < 0 || t.stride[d] < 0)
        checkpoint_error(label, "tensor '", key, "': size ", shape_text(t.size), " / stride ", shape_text(t.stride),
                         " has a negative entry");
      int64_t span = 0;
      overflow |= __builtin_mul_overflow(numel, t.size[d], &numel);
      if (t.size[d] > 0) overflow |= __builtin_mul_overflow(t.size[d] - 1, t.stride[d], &span);
      overflow |= __builtin_add_overflow(last, span, &last);
    }
    if (overflow)
      checkpoint_error(label, "tensor '", key, "': size ", shape_text(t.size), " / stride ", shape_text(t.stride),
                       " overflows int64");
    // A zero-size tensor addresses no element, so it fits any storage.
    if (numel > 0 && last >= s.numel)
      checkpoint_error(label, "tensor '", key, "' of size ", shape_text(t.size), ", stride ", shape_text(t.stride),
                       " and storage offset ", t.storage_offset, " reaches element ", last, " of storage '", s.key,
                       "', which holds only ", s.numel, " elements");

    std::shared_ptr<Storage> storage = load(s, kind);
    Tensor view(storage, t.size, t.stride, t.storage_offset, dtype);
    return view.contiguous();
  }

 private:
  std::shared_ptr<Storage> load(const PickledStorage& s, const StorageDType& kind) {
    const std::string& label = zip_.label();
    auto it = cache_.find(s.key);
    if (it != cache_.end()) {
      // torch saves one dtype per storage; only an empty one may be named with two.
      if (it->second.storage_type != s.storage_type && s.numel != 0)
        checkpoint_error(label, "storage '", s.key, "' is named as both ", it->second.storage_type, " and ",
                         s.storage_type);
      if (it->second.numel != s.numel && s.numel != 0)
        checkpoint_error(label, "storage '", s.key, "' is named with ", it->second.numel, " and with ", s.numel,
                         " elements");
      return it->second.storage;
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(s.numel), kind.element_bytes, &bytes))
      checkpoint_error(label, "storage '", s.key, "' of ", s.numel, " elements overflows a byte count");
    const std::string entry = prefix_ + "data/" + s.key;
    if (!zip_.contains(entry)) checkpoint_error(label, "storage '", s.key, "' has no entry '", entry, "'");
    // Checked before allocating, so a hostile numel cannot make us allocate more than the archive holds.
    const uint64_t stated = zip_.size_of(entry);
    if (stated != bytes)
      checkpoint_error(label, "storage '", s.key, "' (entry '", entry, "') holds ", stated, " bytes, but the pickle says ",
                       s.numel, " x ", kind.storage_type, " = ", bytes, " bytes");
    std::shared_ptr<Storage> storage = Storage::allocate(static_cast<std::size_t>(bytes), Device::cpu());
    if (bytes > 0) zip_.read_into(entry, storage->data(), bytes);
    // The runtime reads bool elements as C++ bool, for which a byte other than 0 or 1 is undefined behaviour.
    if (kind.dtype == DType::boolean) {
      const auto* p = static_cast<const unsigned char*>(storage->data());
      const auto* bad = std::find_if(p, p + bytes, [](unsigned char b) { return b > 1; });
      if (bad != p + bytes)
        checkpoint_error(label, "bool storage '", s.key, "' element ", bad - p, " is byte ", int(*bad),
                         ", expected 0 or 1");
    }
    cache_.emplace(s.key, Cached{s.storage_type, s.numel, storage});
    return storage;
  }

  struct Cached {
    std::string storage_type;
    int64_t numel;
    std::shared_ptr<Storage> storage;
  };
  const ZipArchive& zip_;
  std::string prefix_;
  std::map<std::string, Cached> cache_;
};

bool has_only_string_keys(const PickleValue& dict) {
  return std::all_of(dict.entries.begin(), dict.entries.end(),
                     [](const auto& kv) { return kv.first->kind == Kind::string; });
}

TorchStateDict to_state_dict(const PickleValue& dict, const std::string& path_prefix, StorageReader& storages,
                             const std::string& label) {
  TorchStateDict out;
  std::set<std::string> seen;
  for (const auto& [key_value, value] : dict.entries) {
    const std::string& key = key_value->text;
    if (!seen.insert(key).second) checkpoint_error(label, "dict repeats the key '", path_prefix, key, "'");
    out.keys.push_back(key);
    if (value->kind == Kind::tensor) {
      out.tensors.emplace(key, storages.tensor(path_prefix + key, value->tensor));
    } else if (value->kind == Kind::dict && has_only_string_keys(*value)) {
      out.dicts.emplace(key, std::make_shared<TorchStateDict>(
                                 to_state_dict(*value, path_prefix + key + ".", storages, label)));
    } else {
      out.other_keys.push_back(key);
    }
  }
  return out;
}

// The folder all of a torch archive's entries live in: the one holding data.pkl.
std::string archive_prefix(const ZipArchive& zip) {
  std::vector<std::string> found;
  for (const std::string& name : zip.names()) {
    const std::size_t slash = name.find('/');
    if (slash != std::string::npos && name.substr(slash) == "/data.pkl") found.push_back(name.substr(0, slash + 1));
  }
  if (found.empty()) {
    std::string listing;
    for (std::size_t i = 0; i < zip.names().size() && i < 8; ++i) listing += (i ? ", " : "") + zip.names()[i];
    checkpoint_error(zip.label(), "has no <archive>/data.pkl entry, so it is not a torch.save file (entries: ",
                     listing, zip.names().size() > 8 ? ", ..." : "", ")");
  }
  if (found.size() > 1)
    checkpoint_error(zip.label(), "holds ", found.size(), " data.pkl entries ('", found[0], "data.pkl', '", found[1],
                     "data.pkl'); a torch.save file has one");
  return found[0];
}

std::vector<unsigned char> read_head(const std::string& path, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(detail::concat("torch checkpoint '", path, "': cannot open it"));
  std::vector<unsigned char> head(n);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(n));
  head.resize(static_cast<std::size_t>(in.gcount()));
  return head;
}

json parse_json(const std::string& label, const std::string& entry, const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw IoError(detail::concat("mdlus checkpoint '", label, "': ", entry, " is not valid JSON: ", e.what()));
  }
}

// args.json as Module.save writes it: the class name and module, and the constructor arguments.
void read_args(MdlusCheckpoint& out, const std::string& path, const std::string& text) {
  out.args = parse_json(path, "args.json", text);
  auto string_field = [&](const char* key) {
    auto it = out.args.is_object() ? out.args.find(key) : out.args.end();
    if (it == out.args.end() || !it->is_string())
      throw IoError(detail::concat("mdlus checkpoint '", path, "': args.json has no string \"", key,
                                   "\" (PhysicsNeMo's Module.save always writes one)"));
    return it->get<std::string>();
  };
  out.model_name = string_field("__name__");
  out.model_module = string_field("__module__");
  auto args = out.args.find("__args__");
  if (args == out.args.end() || !args->is_object())
    throw IoError(detail::concat("mdlus checkpoint '", path, "': args.json has no object \"__args__\""));
}

}  // namespace

bool has_legacy_torch_magic(const unsigned char* bytes, std::size_t n) {
  // PROTO 2, then LONG1 of 10 bytes: torch's MAGIC_NUMBER 0x1950a86a20f9469cfc6c.
  static constexpr unsigned char kMagic[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  return n >= sizeof kMagic && std::memcmp(bytes, kMagic, sizeof kMagic) == 0;
}

TorchStateDict read_torch_state_dict(const ZipArchive& zip) {
  const std::string& label = zip.label();
  const std::string prefix = archive_prefix(zip);
  if (zip.contains(prefix + "byteorder")) {
    const std::string order = zip.read_text(prefix + "byteorder", 16);
    if (order != "little")
      checkpoint_error(label, "byteorder is '", order, "'; ShardRT reads little-endian checkpoints only (load and ",
                       "re-save it with torch on a little-endian machine)");
  }
  const std::vector<unsigned char> pickle = zip.read(prefix + "data.pkl", kMaxPickleBytes);
  PickleValuePtr root = unpickle_torch(label, pickle.data(), pickle.size());
  if (root->kind != Kind::dict)
    checkpoint_error(label, "holds a ", root->kind_name(), ", expected a dict (a state dict or a training checkpoint)");
  if (!has_only_string_keys(*root)) checkpoint_error(label, "top-level dict has a key that is not a string");
  StorageReader storages(zip, prefix);
  return to_state_dict(*root, "", storages, label);
}

TorchStateDict load_torch_state_dict(const std::string& path) {
  const std::vector<unsigned char> head = read_head(path, 16);
  if (has_legacy_torch_magic(head.data(), head.size()))
    checkpoint_error(path, "is in the legacy (pre-1.6) torch.save format, which ShardRT does not read; re-save it ",
                     "with a current torch: torch.save(torch.load(path), path)");
  if (!has_zip_magic(head.data(), head.size()))
    checkpoint_error(path, "is not a torch.save zip archive (no zip signature at its start)");
  return read_torch_state_dict(ZipArchive::open_file(path));
}

MdlusCheckpoint load_mdlus(const std::string& path) {
  const std::vector<unsigned char> head = read_head(path, 512);
  MdlusCheckpoint out;
  std::shared_ptr<const std::vector<unsigned char>> model;
  std::string args_text, metadata_text;
  auto missing = [&](const char* entry) {
    return IoError(detail::concat("mdlus checkpoint '", path, "': has no ", entry,
                                  " (PhysicsNeMo's Module.save writes model.pt, args.json and metadata.json)"));
  };
  if (has_zip_magic(head.data(), head.size())) {
    const ZipArchive zip = ZipArchive::open_file(path);
    if (!zip.contains("model.pt")) throw missing("model.pt");
    if (!zip.contains("args.json")) throw missing("args.json");
    model = std::make_shared<const std::vector<unsigned char>>(zip.read("model.pt", kMaxModelBytes));
    args_text = zip.read_text("args.json", kMaxJsonBytes);
    if (zip.contains("metadata.json")) metadata_text = zip.read_text("metadata.json", kMaxJsonBytes);
    out.format = "mdlus-zip";
  } else if (has_tar_magic(head.data(), head.size())) {
    const TarArchive tar = TarArchive::open_file(path);
    if (!tar.contains("model.pt")) throw missing("model.pt");
    if (!tar.contains("args.json")) throw missing("args.json");
    model = std::make_shared<const std::vector<unsigned char>>(tar.read("model.pt", kMaxModelBytes));
    args_text = tar.read_text("args.json", kMaxJsonBytes);
    if (tar.contains("metadata.json")) metadata_text = tar.read_text("metadata.json", kMaxJsonBytes);
    out.format = "mdlus-tar";
  } else {
    throw IoError(detail::concat("mdlus checkpoint '", path, "': is neither a zip nor a tar archive"));
  }
  read_args(out, path, args_text);
  if (!metadata_text.empty()) out.metadata = parse_json(path, "metadata.json", metadata_text);
  const std::string model_label = path + ": model.pt";
  if (has_legacy_torch_magic(model->data(), model->size()))
    checkpoint_error(model_label, "is in the legacy (pre-1.6) torch.save format, which ShardRT does not read; ",
                     "re-save the model with a current PhysicsNeMo");
  out.state_dict = read_torch_state_dict(ZipArchive::open_memory(model_label, model));
  return out;
}

}  // namespace shardrt
